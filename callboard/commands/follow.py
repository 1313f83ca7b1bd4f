"""`callboard events RUN` (the run's events, followed live until it ends) and
`callboard context RUN` (its shared context)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from callboard.commands.api import (
    KeyOpt,
    Output,
    OutputOpt,
    ProfileOpt,
    UrlOpt,
    emit,
    hub_options,
    print_table,
    say,
)
from callboard.commands.ids import run_id as resolve_run
from callboard.commands.runs import RunArg
from callboard.commands.stream import follow

# What each event type shows after its time and type, for people (-o json has it all).
SHOWN = ("cue", "state", "status", "attempt", "reason", "fired_by", "names", "to", "key",
         "source", "severity", "error", "id")  # fmt: skip


def events(
    ctx: typer.Context,
    run: RunArg,
    since: Annotated[
        str | None, typer.Option(help="only events after this event id (Last-Event-ID)")
    ] = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Follow the run's events from its start, live, until its final event (Ctrl-C stops
    sooner); a stream the hub ends or that breaks is resumed after the last id read.
    With -o json: one JSON object per line, {id, event, data}; --since ID resumes."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        full = resolve_run(c, run)
        for entry_id, name, data in follow(c, full, since):
            if hub.output is Output.json:
                print(json.dumps({"id": entry_id, "event": name, "data": data}), flush=True)
            else:
                detail = " ".join(f"{k}={data[k]}" for k in SHOWN if data.get(k) not in (None, ""))
                say(f"{data.get('at') or '':<27} {name:<14} {detail}")


def context(
    ctx: typer.Context,
    run: RunArg,
    tag: Annotated[str | None, typer.Option(help="only entries with this tag")] = None,
    source: Annotated[str | None, typer.Option(help="only entries this agent wrote")] = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """The run's shared context: every key, its value and which agent wrote it."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        answer = c.context(resolve_run(c, run), tag, source)
    emit(hub.output, answer, _context_table)


def _context_table(answer: dict[str, Any]) -> None:
    if not answer["entries"]:
        say("no context entries")
        return
    table = Table(show_edge=False)
    for column in ("key", "value", "source", "tags"):
        table.add_column(column, overflow="fold")
    for key, entry in answer["entries"].items():
        value = json.dumps(entry.get("value"), default=str)
        table.add_row(key, value, entry.get("source") or "", " ".join(entry.get("tags") or []))
    print_table(table)
