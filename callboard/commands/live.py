"""A live table of a run's cues: state, what each waits for (`reason`) and elapsed time."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from callboard.client import Client
from callboard.commands.stream import DONE, follow, run_now

COLORS = {
    "pending": "dim", "waiting": "yellow", "armed": "magenta", "warning": "cyan",
    "standby": "blue", "go": "bold green", "completed": "green", "failed": "bold red",
    "blocked": "red", "cancelled": "dim", "success": "bold green", "partial": "yellow",
    "running": "cyan", "holding": "magenta", "dry": "blue",
}  # fmt: skip


def _epoch(moment: str | None) -> float | None:
    return datetime.fromisoformat(moment).timestamp() if moment else None


def elapsed(cue: dict[str, Any], now: float) -> str:
    start = _epoch(cue.get("warned_at") or cue.get("go_at"))
    if start is None:
        return ""
    end = _epoch(cue.get("completed_at")) or now
    return f"{max(0.0, end - start):.1f}s"


def run_table(run: dict[str, Any], now: float | None = None) -> Group:
    now = time.time() if now is None else now
    status = run["status"]
    head = Text.assemble(
        (f"{run['cuelist']} ", "bold"), (f"run {run['run_id']}  ", "dim"),
        (status, COLORS.get(status, "")),
        (f"  {run['hold_reason']}" if run.get("hold_reason") else "", "magenta"),
    )  # fmt: skip
    table = Table(show_edge=False, pad_edge=False, expand=False)
    with_results = any(results_of(cue) for cue in run["cues"].values())
    columns = ["cue", "state", "try", "waiting for", "targets", "elapsed"]
    for column in [*columns, "result"] if with_results else columns:
        table.add_column(column, no_wrap=column not in ("waiting for", "result"))
    for cue_id, cue in run["cues"].items():
        state = cue["state"]
        targets = " ".join(f"{a}:{s}" for a, s in cue["targets"].items())
        reason = cue.get("error") if state in ("failed", "blocked") else cue.get("reason")
        row: list[Text | str] = [  # hub text as Text: a `[...]` in it is not markup
            Text(cue_id), Text(state, COLORS.get(state, "")), str(cue["attempt"] or ""),
            Text(reason or ""), Text(targets), elapsed(cue, now),
        ]  # fmt: skip
        if with_results:
            row.append(Text(results_of(cue)))
        table.add_row(*row)
    spend = budget_line(run)
    return Group(head, Text(spend, "dim"), table) if spend else Group(head, table)


def budget_line(run: dict[str, Any]) -> str:
    """`budget: tokens 1050 / 1000, cost 0.75 / 2`: what the run used of each limit."""
    budget, used = run.get("budget") or {}, run.get("usage") or {}
    limits = {k: v for k, v in budget.items() if k not in ("counters", "warn_at")}
    limits.update({f"counters.{k}": v for k, v in (budget.get("counters") or {}).items()})
    spent = {**used, **{f"counters.{k}": v for k, v in (used.get("counters") or {}).items()}}
    parts = [f"{name} {spent.get(name, 0):g} / {limit:g}" for name, limit in limits.items()]
    return "budget: " + ", ".join(parts) if parts else ""


def results_of(cue: dict[str, Any]) -> str:
    """What the cue's targets returned (`Result(result=...)`), compact: `agent: json`, from
    the hub's `result` (by agent; older hubs: `results`)."""
    results = cue.get("result", cue.get("results"))
    if isinstance(results, dict):
        return " ".join(
            f"{a}: {json.dumps(r, default=str)}" for a, r in results.items() if r not in (None, {})
        )
    return "" if results is None else json.dumps(results, default=str)


class RunView:
    """Re-rendered on every refresh, so elapsed times tick between events."""

    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run

    def __rich__(self) -> Group:
        return run_table(self.run)


def watch(client: Client, run_id: str, console: Console) -> dict[str, Any]:
    """Follow a run live until it finishes; returns its final state."""
    view = RunView(run_now(client, run_id))
    with Live(view, console=console, refresh_per_second=4):
        if view.run["status"] not in DONE:
            for _event in follow(client, run_id):
                view.run = run_now(client, run_id)
            view.run = run_now(client, run_id)
    if not console.is_terminal:
        console.line()  # Live leaves the last frame without a line end when not on a tty
    return view.run


def wait_done(client: Client, run_id: str) -> dict[str, Any]:
    """Follow a run until it finishes without drawing it (for `-o json`); its final state."""
    run = run_now(client, run_id)
    if run["status"] not in DONE:
        for _event in follow(client, run_id):
            pass
        run = run_now(client, run_id)
    return run
