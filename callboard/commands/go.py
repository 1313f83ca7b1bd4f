"""`callboard go RUN CUE`: an operator GO for an armed cue."""

from __future__ import annotations

import typer

from callboard.commands.api import (
    KeyedOpt,
    KeyOpt,
    Output,
    OutputOpt,
    ProfileOpt,
    UrlOpt,
    emit,
    hub_options,
    say,
)
from callboard.commands.ids import run_id as resolve_run
from callboard.commands.runs import CueArg, RunArg


def go(
    ctx: typer.Context,
    run_id: RunArg,
    cue_id: CueArg,
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """GO for an armed cue; refused (exit 1) with the reason when it is not armed."""
    with hub_options(ctx, output, url, api_key, profile).client() as c:
        result = c.go(resolve_run(c, run_id), cue_id, idempotency_key)
    emit(output, result, lambda r: say(f"GO {cue_id}: {r['state']} (attempt {r['attempt']})"))
