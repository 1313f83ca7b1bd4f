"""Following a run's events to its end, across the streams the hub ends (CALLBOARD_SSE_MAX_S,
a slow reader cut off) or that break: `follow` resumes each from the last event id it read
(Last-Event-ID) and stops only once the run is done and its final event has been read.

A 503 (the hub has its most streams open) or a broken link is waited out with backoff
(Retry-After when the hub gives one) for as long as the run goes on; a hub that does not
answer at all is given RESTART_S to come back (a restart) before the command gives up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from callboard.client import ApiError, Client, Unreachable

DONE = ("success", "partial", "failed", "cancelled", "dry")
FIRST_WAIT_S = 0.5  # the first pause after a stream that gave nothing; doubled up to MAX
MAX_WAIT_S = 5.0
RESTART_S = 60.0  # how long a hub that does not answer may take to come back
Event = tuple[str | None, str, dict[str, Any]]


class Backoff:
    """Pauses that double from FIRST_WAIT_S to MAX_WAIT_S; `reset` after progress."""

    def __init__(self) -> None:
        self.next_s = FIRST_WAIT_S

    def reset(self) -> None:
        self.next_s = FIRST_WAIT_S

    def wait(self, asked_s: float | None = None) -> None:
        time.sleep(min(asked_s if asked_s is not None else self.next_s, MAX_WAIT_S))
        self.next_s = min(self.next_s * 2, MAX_WAIT_S)


def finishes(name: str, data: dict[str, Any]) -> bool:
    """The event that closes a run: a `run` event with a final status (as the hub's)."""
    return name == "run" and data.get("status") in DONE


def run_now(c: Client, run_id: str) -> dict[str, Any]:
    """The run, waiting with backoff (up to RESTART_S) while the hub does not answer or
    answers 503: a hub restarting is not a reason to stop following."""
    deadline = time.monotonic() + RESTART_S
    backoff = Backoff()
    while True:
        try:
            return c.run(run_id)
        except (Unreachable, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.status != 503:
                raise
            if time.monotonic() >= deadline:
                raise
            backoff.wait(exc.retry_after_s if isinstance(exc, ApiError) else None)


def follow(c: Client, run_id: str, since: str | None = None) -> Iterator[Event]:
    """The run's events after `since` as (id, name, data), live, until its final event."""
    last = since
    ended = False  # the last event read closes the run (a retry may open it again)
    backoff = Backoff()
    gave_up_at = time.monotonic() + RESTART_S  # for a done run whose stream cannot be read
    while True:
        read, broke, asked_s = False, False, None
        try:
            for entry_id, name, data in c.event_entries(run_id, last):
                last = entry_id or last
                ended, read = finishes(name, data), True
                yield entry_id, name, data
        except Unreachable:
            broke = True  # the stream broke (hub restarting?): resume if the run goes on
        except ApiError as exc:
            if exc.status != 503:
                raise
            broke, asked_s = True, exc.retry_after_s  # too many streams open: wait, resume
        if run_now(c, run_id)["status"] in DONE:
            if ended or not (read or broke):
                return  # its final event was read, or the hub has nothing after `last`
            if broke and time.monotonic() >= gave_up_at:
                raise Unreachable(f"the events of run {run_id} after {last} cannot be read")
        if read:
            backoff.reset()
            gave_up_at = time.monotonic() + RESTART_S
        else:
            backoff.wait(asked_s)
