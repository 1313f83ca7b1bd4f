"""`callboard submit FILE`: validate and store a cuelist on the hub."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from callboard.client import DEFAULT_URL
from callboard.commands.api import UNUSABLE, KeyOpt, UrlOpt, client, console, errors


def content_type(path: Path) -> str:
    return "application/json" if path.suffix.lower() == ".json" else "application/yaml"


def submit(
    file: Annotated[Path, typer.Argument(help="a cuelist, YAML or JSON")],
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Submit a cuelist: the hub validates it and stores it under its version (a SHA-256)."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        errors.print(f"[red]error:[/] cannot read {file}: {exc}")
        raise typer.Exit(UNUSABLE) from None
    with client(url, api_key) as c:
        stored = c.submit(text, content_type(file))
    console.print(f"stored [bold]{stored['name']}[/] version {stored['version']}")
    for w in stored.get("warnings") or []:
        where = " ".join(f"{k}={w[k]}" for k in ("cue", "key", "line") if w.get(k) is not None)
        console.print(f"  [yellow]warning[/] [{w.get('code')}] {w.get('message')}  {where}")
