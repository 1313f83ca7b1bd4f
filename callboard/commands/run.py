"""`callboard run NAME [--watch] [--dry] [--param K=V] [--budget K=V]`: start a run of a
stored cuelist."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from callboard.client import ApiError, BadAnswer, Unreachable
from callboard.commands.api import (
    OK,
    REFUSED,
    KeyedOpt,
    KeyOpt,
    Output,
    OutputOpt,
    ProfileOpt,
    UrlOpt,
    console,
    fail,
    hub_options,
    print_json,
    say,
)
from callboard.commands.live import run_table, wait_done, watch

GOOD = ("success", "dry")


def _params(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--param wants KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _budget(pairs: list[str]) -> dict[str, Any] | None:
    """`tokens=5000`, `counters.api_calls=9`: limits merged over the cuelist's budget."""
    out: dict[str, Any] = {}
    for key, value in _params(pairs).items():
        if key.startswith("counters."):
            out.setdefault("counters", {})[key.removeprefix("counters.")] = value
        else:
            out[key] = value
    return out or None


def run(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="a stored cuelist")],
    watch_: Annotated[bool, typer.Option("--watch", help="follow the run live")] = False,
    dry: Annotated[bool, typer.Option("--dry", help="walk it with stand-in agents")] = False,
    version: Annotated[str | None, typer.Option(help="a stored version (default: latest)")] = None,
    param: Annotated[list[str] | None, typer.Option("--param", help="KEY=VALUE (JSON)")] = None,
    idempotency_key: KeyedOpt = None,
    budget: Annotated[
        list[str] | None,
        typer.Option(
            "--budget",
            help="LIMIT=N over the cuelist's budget (tokens=5000, "
            "cost=1.5, messages=N, wall_s=S, counters.NAME=N)",
        ),
    ] = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Start a run and print its id; with --watch follow it live and exit 1 unless it
    succeeds (with -o json: print the final run)."""
    params = _params(param or [])
    as_json = output is Output.json
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        run_id = c.start_run(
            name, version=version, params=params, dry=dry, idempotency_key=idempotency_key,
            budget=_budget(budget or []),
        )  # fmt: skip
        if not (watch_ or dry):
            if as_json:
                print_json({"run_id": run_id})
            else:
                console.print(run_id, highlight=False, soft_wrap=True)
            return
        if not as_json:
            say(f"run {run_id}")
        try:
            if as_json:
                final = wait_done(c, run_id) if watch_ else c.run(run_id)
            else:
                final = watch(c, run_id, console) if watch_ else c.run(run_id)
        except (ApiError, BadAnswer, Unreachable):
            if as_json:  # the run started: its id is printed whatever happens next
                print_json({"run_id": run_id})
            raise
    if as_json:
        print_json(final)
    else:
        if dry and not watch_:
            console.print(run_table(final))
        if dry:
            say("fires in order: " + " -> ".join(final["record"]["fired"]))
    raise typer.Exit(OK if final["status"] in GOOD else REFUSED)
