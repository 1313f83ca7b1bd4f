"""`callboard run NAME [--watch] [--dry]`: start a run of a stored cuelist."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from callboard.client import DEFAULT_URL
from callboard.commands.api import OK, REFUSED, UNUSABLE, KeyOpt, UrlOpt, client, console, errors
from callboard.commands.live import run_table, watch

GOOD = ("success", "dry")


def _params(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            errors.print(f"[red]error:[/] --param wants KEY=VALUE, got {pair!r}")
            raise typer.Exit(UNUSABLE)
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def run(
    name: Annotated[str, typer.Argument(help="a stored cuelist")],
    watch_: Annotated[bool, typer.Option("--watch", help="follow the run live")] = False,
    dry: Annotated[bool, typer.Option("--dry", help="walk it with stand-in agents")] = False,
    version: Annotated[str | None, typer.Option(help="a stored version (default: latest)")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", help="KEY=VALUE (JSON)")] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Start a run; with --watch show it live and exit 1 unless it succeeds."""
    params = _params(param or [])
    with client(url, api_key) as c:
        run_id = c.start_run(
            name, version=version, params=params, dry=dry, idempotency_key=idempotency_key
        )
        if not (watch_ or dry):
            console.print(run_id)
            return
        console.print(f"run {run_id}")
        final = watch(c, run_id, console) if watch_ else c.run(run_id)
    if dry and not watch_:
        console.print(run_table(final))
    if dry:
        console.print("fires in order: " + " -> ".join(final["record"]["fired"]))
    raise typer.Exit(OK if final["status"] in GOOD else REFUSED)
