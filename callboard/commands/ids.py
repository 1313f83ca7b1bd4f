"""Run and escalation ids on the command line: a unique prefix is enough, as in git.

Typed ids are resolved through the hub's lists (GET /v1/runs, GET /v1/escalations, the
most recent 1,000): one match is used, none or several end the command with exit 2 and
the candidates. Tables on a terminal show the shortest prefix that tells the listed ids
apart (at least 8 characters); piped output always carries full ids.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from itertools import pairwise

from callboard.client import Client
from callboard.commands.api import UNUSABLE, fail

FULL_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
SEARCH_LIMIT = 1000
MIN_SHOWN = 8
SHOWN_CANDIDATES = 5


def run_id(c: Client, typed: str) -> str:
    """The full run id for `typed` (a full id or a unique prefix of a recent run's)."""

    def listed() -> list[str]:
        return [r["run_id"] for r in c.runs_page(SEARCH_LIMIT)["data"]]

    return _resolve("run", typed, listed)


def escalation_id(c: Client, typed: str) -> str:
    def listed() -> list[str]:
        return [e["id"] for e in c.escalations(limit=SEARCH_LIMIT)["data"]]

    return _resolve("escalation", typed, listed)


def _resolve(what: str, typed: str, listed: Callable[[], list[str]]) -> str:
    typed = typed.strip().lower()
    if FULL_ID.match(typed):
        return typed  # a full id goes as it is: the hub says 404 if it does not exist
    if not typed:
        fail(f"an empty {what} id", UNUSABLE)
    found = [i for i in listed() if i.startswith(typed)]
    if len(found) == 1:
        return found[0]
    if not found:
        fail(f"no {what} id starts with {typed!r} (among the {SEARCH_LIMIT} most recent)")
    shown = ", ".join(found[:SHOWN_CANDIDATES]) + (", ..." if len(found) > SHOWN_CANDIDATES else "")
    return str(fail(f"{what} id prefix {typed!r} is ambiguous: {len(found)} match ({shown})"))


def on_terminal() -> bool:
    return sys.stdout.isatty()


def shortener(ids: Iterable[str | None], terminal: bool | None = None) -> Callable[[str], str]:
    """How ids are shown: whole when piped; on a terminal, the shortest prefix that still
    tells every listed id apart (never under MIN_SHOWN characters)."""
    known = sorted({i for i in ids if i})
    if not (on_terminal() if terminal is None else terminal) or not known:
        return lambda i: i
    width = MIN_SHOWN
    for a, b in pairwise(known):
        common = next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
        width = max(width, common + 1)
    return lambda i: i[:width]
