"""`callboard go RUN CUE`: an operator GO for an armed cue."""

from __future__ import annotations

from typing import Annotated

import typer

from callboard.client import DEFAULT_URL
from callboard.commands.api import KeyOpt, UrlOpt, client, console


def go(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    cue_id: Annotated[str, typer.Argument(metavar="CUE")],
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """GO for an armed cue; refused (exit 1) with the reason when it is not armed."""
    with client(url, api_key) as c:
        result = c.go(run_id, cue_id)
    console.print(f"GO {cue_id}: {result['state']} (attempt {result['attempt']})")
