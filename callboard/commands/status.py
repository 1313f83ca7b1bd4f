"""`callboard status [RUN]`: recent runs, or one run's cues with what each waits for."""

from __future__ import annotations

from typing import Annotated

import typer

from callboard.commands.api import (
    KeyOpt,
    Output,
    OutputOpt,
    ProfileOpt,
    UrlOpt,
    emit,
    hub_options,
    print_table,
)
from callboard.commands.ids import run_id as resolve_run
from callboard.commands.live import run_table
from callboard.commands.runs import runs_table


def status(
    ctx: typer.Context,
    run_id: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="a run id or a unique prefix")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Show recent runs, or one run in detail (each cue's state, reason, targets, result)."""
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        if run_id:
            run = c.run(resolve_run(c, run_id))
            emit(output, run, lambda r: print_table(run_table(r)))
            return
        page = c.runs_page(limit)
    emit(output, page, runs_table)
