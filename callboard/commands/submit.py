"""`callboard submit FILE`: validate and store a cuelist on the hub (`--check`: only
validate it there, the hub's POST /v1/cuelists/validate)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from callboard.commands.api import (
    REFUSED,
    UNUSABLE,
    KeyOpt,
    Output,
    OutputOpt,
    ProfileOpt,
    UrlOpt,
    emit,
    fail,
    hub_options,
    say,
)


def content_type(path: Path) -> str:
    return "application/json" if path.suffix.lower() == ".json" else "application/yaml"


def _issues(kind: str, items: list[dict[str, Any]]) -> None:
    for w in items:
        where = " ".join(f"{k}={w[k]}" for k in ("cue", "key", "line") if w.get(k) is not None)
        line = f" [{w.get('code')}] {w.get('message')}  {where}".rstrip()
        say(Text.assemble("  ", (kind, "yellow"), line))


def submit(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="a cuelist, YAML or JSON")],
    check: Annotated[
        bool, typer.Option("--check", help="only validate it on the hub; store nothing")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="with --check: warnings are errors")
    ] = False,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Submit a cuelist: the hub validates it and stores it under its version (a SHA-256)."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}", UNUSABLE)
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        if check:
            report = c.check(text, content_type(file), strict)
            emit(output, report, _show_report)
            if not report["valid"]:
                raise typer.Exit(REFUSED)
            return
        stored = c.submit(text, content_type(file))

    def show(s: dict[str, Any]) -> None:
        say(Text.assemble("stored ", (s["name"], "bold"), f" version {s['version']}"))
        _issues("warning", s.get("warnings") or [])

    emit(output, stored, show)


def _show_report(report: dict[str, Any]) -> None:
    if report["valid"]:
        say(f"valid: {report.get('name')} version {report.get('version')}")
    else:
        say(Text.assemble(("invalid", "red"), f", {len(report['errors'])} errors"))
    _issues("error", report.get("errors") or [])
    _issues("warning", report.get("warnings") or [])
