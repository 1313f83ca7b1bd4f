"""`callboard escalations`: the operator queue (list, the default, filtered) and `resolve`
(binding; for a conflict, `--winner RUN/CUE`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from callboard.client import Client
from callboard.commands.api import (
    Hub,
    KeyedOpt,
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
from callboard.commands.ids import escalation_id, shortener
from callboard.commands.ids import run_id as resolve_run

app = typer.Typer(
    name="escalations",
    help="The operator queue: list (the default) and resolve.",
    invoke_without_command=True,
    no_args_is_help=False,
)
StatusOpt = Annotated[
    str | None, typer.Option("--status", help="open, recorded or resolved (default: all)")
]
RunOpt = Annotated[
    str | None, typer.Option("--run", help="only this run's (an id or a unique prefix)")
]
LimitOpt = Annotated[int, typer.Option(min=1, max=1000)]


@app.callback()
def escalations(
    ctx: typer.Context,
    status: StatusOpt = None,
    run: RunOpt = None,
    limit: LimitOpt = 200,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """The operator queue: list (the default) and resolve."""
    hub = hub_options(ctx, output, url, api_key, profile)
    if ctx.invoked_subcommand is None:
        _list(hub, status, run, limit)


@app.command("list")
def list_(
    ctx: typer.Context,
    status: StatusOpt = None,
    run: RunOpt = None,
    limit: LimitOpt = 200,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Escalations, newest first, with their severity, cause and status."""
    _list(hub_options(ctx, output, url, api_key, profile), status, run, limit)


def _list(hub: Hub, status: str | None, run: str | None, limit: int) -> None:
    with hub.client() as c:
        page = c.escalations(status, resolve_run(c, run) if run else None, limit)
    emit(hub.output, page, _table)


def _table(page: dict[str, Any]) -> None:
    rows = page["data"]
    if not rows:
        say("no escalations")
        return
    short = shortener([e["id"] for e in rows] + [e.get("run_id") for e in rows])
    table = Table(show_edge=False)
    for column in ("id", "severity", "status", "type", "run", "cue", "count", "detail"):
        table.add_column(column, no_wrap=column not in ("detail",))
    for e in rows:
        table.add_row(
            short(e["id"]), e["severity"], e["status"], e["type"],
            short(e["run_id"]) if e.get("run_id") else "", e.get("cue_id") or "",
            str(e.get("count", 1)), e.get("detail") or e.get("cause") or "",
        )  # fmt: skip
    print_table(table)


@app.command()
def resolve(
    ctx: typer.Context,
    escalation: Annotated[str, typer.Argument(metavar="ID", help="an id or a unique prefix")],
    winner: Annotated[
        str | None, typer.Option(help="a conflict's winner: RUN/CUE, or a cue id")
    ] = None,
    note: Annotated[str | None, typer.Option(help="recorded with the resolution")] = None,
    answer: Annotated[
        str | None,
        typer.Option(help="the answer to an agent's question (input_required): sent to it"),
    ] = None,
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Resolve an escalation (binding); a critical one's pause on new GOs lifts."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        esc_id = escalation_id(c, escalation)
        resolved = c.resolve(esc_id, _winner(c, winner), note, answer, idempotency_key)
    emit(hub.output, resolved, lambda a: say(f"escalation {a['id']}: {a['status']}"))


def _winner(c: Client, winner: str | None) -> str | None:
    """`RUN/CUE` with RUN a prefix, as every other command takes it, made whole: the hub
    compares the winner with the rivals' full `run/cue`. A bare cue id goes as typed."""
    if not winner or "/" not in winner:
        return winner
    run, _, cue = winner.partition("/")
    return f"{resolve_run(c, run)}/{cue}"
