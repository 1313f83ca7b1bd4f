"""Operator commands on runs: `runs` (list, filtered), `cancel`, `condition`, `retry`,
`rerun` and `budget`. A run is named by its id or a unique prefix of it."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

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
    emit,
    fail,
    hub_options,
    print_json,
    print_table,
    say,
)
from callboard.commands.ids import run_id as resolve_run
from callboard.commands.ids import shortener
from callboard.commands.live import COLORS, budget_line, wait_done, watch

RunArg = Annotated[str, typer.Argument(metavar="RUN", help="a run id or a unique prefix")]
CueArg = Annotated[str, typer.Argument(metavar="CUE")]
STATUSES = ("running", "holding", "success", "partial", "failed", "cancelled", "dry")


def runs_table(page: dict[str, Any]) -> None:
    runs = page["data"]
    if not runs:
        say("no runs")
        return
    short = shortener(r["run_id"] for r in runs)
    table = Table(show_edge=False)
    for column in ("run", "cuelist", "status", "started", "cues"):
        table.add_column(column, no_wrap=column != "cues")
    for r in runs:
        counts = " ".join(f"{k}:{v}" for k, v in sorted(r["counts"].items()))
        status_cell = Text(r["status"], COLORS.get(r["status"], ""))
        table.add_row(short(r["run_id"]), r["cuelist"], status_cell, r["started_at"] or "", counts)
    print_table(table)


def runs(
    ctx: typer.Context,
    cuelist: Annotated[str | None, typer.Option(help="only runs of this cuelist")] = None,
    status: Annotated[
        str | None, typer.Option(help=f"only runs in this status ({', '.join(STATUSES)})")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="most recent first")] = 20,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """List recent runs, newest first (filters: --cuelist, --status)."""
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        page = c.runs_page(limit, cuelist=cuelist, status=status)
    emit(output, page, runs_table)


def cancel(
    ctx: typer.Context,
    run: RunArg,
    reason: Annotated[str | None, typer.Option(help="recorded on the run")] = None,
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Cancel a run: every cue not yet done is stood down."""
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        answer = c.cancel(resolve_run(c, run), reason, idempotency_key)
    emit(output, answer, lambda a: say(f"run {a['run_id']}: {a['status']}"))


def condition(
    ctx: typer.Context,
    run: RunArg,
    name: Annotated[str, typer.Argument(help="e.g. approval_received")],
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Raise a condition on a run (an approval, say); cues waiting for it may fire."""
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        answer = c.condition(resolve_run(c, run), name, idempotency_key)
    emit(output, answer, lambda a: say(f"raised {name}; raised so far: {a['conditions']}"))


def retry(
    ctx: typer.Context,
    run: RunArg,
    cue: CueArg,
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Retry a failed or blocked cue (a new attempt; its dependents are unblocked)."""
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        answer = c.retry(resolve_run(c, run), cue, idempotency_key)
    emit(output, answer, lambda a: say(f"retry {cue}: {a['state']} (attempt {a['attempt']})"))


def rerun(
    ctx: typer.Context,
    run: RunArg,
    from_failure: Annotated[
        bool, typer.Option("--from-failure", help="skip the cues that completed")
    ] = False,
    watch_: Annotated[bool, typer.Option("--watch", help="follow the new run live")] = False,
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Start a new run of the same cuelist version; the two runs link to each other."""
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        answer = c.rerun(resolve_run(c, run), from_failure, idempotency_key)
        new_id = str(answer["run_id"])
        if not watch_:
            emit(output, answer, lambda a: say(f"run {a['run_id']} (rerun of {a['rerun_of']})"))
            return
        if output is Output.table:
            say(f"run {new_id} (rerun of {answer['rerun_of']})")
        try:
            final = wait_done(c, new_id) if output is Output.json else watch(c, new_id, console)
        except (ApiError, BadAnswer, Unreachable):
            if output is Output.json:  # the run started: its id is printed whatever happens
                print_json(answer)
            raise
        if output is Output.json:
            print_json(final)
    raise typer.Exit(OK if final["status"] == "success" else REFUSED)


def budget(
    ctx: typer.Context,
    run: RunArg,
    tokens: Annotated[int | None, typer.Option(min=0)] = None,
    cost: Annotated[float | None, typer.Option(min=0)] = None,
    messages: Annotated[int | None, typer.Option(min=0)] = None,
    wall_s: Annotated[float | None, typer.Option("--wall-s", min=0)] = None,
    counter: Annotated[
        list[str] | None,
        typer.Option(metavar="NAME=N", help="a named counter's limit (repeatable)"),
    ] = None,
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Change a run's budget limits (the rest are kept); a run held by a spent budget goes
    on when the new one allows. Prints the limits and what was used."""
    limits: dict[str, Any] = {
        k: v
        for k, v in (("tokens", tokens), ("cost", cost), ("messages", messages), ("wall_s", wall_s))
        if v is not None
    }
    counters = dict(_counter(item) for item in counter or [])
    if counters:
        limits["counters"] = counters
    if not limits:
        fail("give at least one of --tokens, --cost, --messages, --wall-s, --counter")
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        answer = c.budget(resolve_run(c, run), limits, idempotency_key)
    emit(output, answer, _budget_lines)


def _counter(item: str) -> tuple[str, int]:
    name, _, value = item.partition("=")
    if not name or not value.isdigit():
        fail(f"--counter takes NAME=N (a whole number), not {item!r}")
    return name, int(value)


def _budget_lines(answer: dict[str, Any]) -> None:
    say(f"run {answer.get('run_id')}: {answer.get('status')}")
    say(f"  {budget_line(answer) or 'no budget'}")
    if answer.get("hold_reason"):
        say(f"  holding: {answer['hold_reason']}")
