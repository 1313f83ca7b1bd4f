"""`callboard status [RUN]`: recent runs, or one run's cues with what each waits for."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from callboard.client import DEFAULT_URL
from callboard.commands.api import KeyOpt, UrlOpt, client, console
from callboard.commands.live import COLORS, run_table


def status(
    run_id: Annotated[str | None, typer.Argument(metavar="[RUN]")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Show recent runs, or one run in detail."""
    with client(url, api_key) as c:
        if run_id:
            console.print(run_table(c.run(run_id)))
            return
        runs = c.runs(limit)
    table = Table(show_edge=False)
    for column in ("run", "cuelist", "status", "started", "cues"):
        table.add_column(column)
    for r in runs:
        counts = " ".join(f"{k}:{v}" for k, v in sorted(r["counts"].items()))
        color = COLORS.get(r["status"], "")
        status_cell = f"[{color}]{r['status']}[/]" if color else r["status"]
        table.add_row(r["run_id"], r["cuelist"], status_cell, r["started_at"] or "", counts)
    console.print(table if runs else "no runs yet")
