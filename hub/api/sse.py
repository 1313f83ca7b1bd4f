"""Follow a run's event stream: replay it (XRANGE), then tail it (XREAD BLOCK) until it ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from hub.api.schemas import ts
from hub.service import Hub
from hub.store.state import RunEvent
from protocols.states import RunStatus

BLOCK_MS = 1_000
BATCH = 500


def finishes(event: dict[str, Any]) -> bool:
    """True for the event that closes a run (a `run` event with a final status)."""
    if event.get("type") != "run":
        return False
    try:
        return RunStatus(str(event.get("status"))).done
    except ValueError:
        return False


def _public(event: dict[str, Any]) -> dict[str, Any]:
    at = event.get("at")
    return {**event, "at": ts(at)} if isinstance(at, int | float) else event


async def follow(
    hub: Hub, run_id: str, after: str, stopping: asyncio.Event
) -> AsyncIterator[RunEvent]:
    """The run's events after entry `after`; ends after the run's final event, on shutdown,
    or after `sse_max_s` (the client resumes from its Last-Event-ID). A final event that
    later ones follow (a retry ran the run again) does not end it."""
    deadline = time.monotonic() + hub.settings.sse_max_s
    last = after
    while True:  # replay what is there
        batch = await hub.store.events(run_id, last, count=BATCH)
        for n, event in enumerate(batch, 1):
            last = event.id
            yield RunEvent(event.id, _public(event.data))
            if finishes(event.data) and n == len(batch) and await _ended(hub, run_id):
                return
        if len(batch) < BATCH:
            break
    while not stopping.is_set() and time.monotonic() < deadline:
        batch = await hub.store.tail_events(run_id, last, BATCH, BLOCK_MS)
        if not batch:
            run = await hub.store.run(run_id)
            if run is None or run.status.done:  # trimmed or gone: nothing more will come
                return
            continue
        for n, event in enumerate(batch, 1):
            last = event.id
            yield RunEvent(event.id, _public(event.data))
            if finishes(event.data) and n == len(batch) and await _ended(hub, run_id):
                return


async def _ended(hub: Hub, run_id: str) -> bool:
    """The run is over (or gone): its final event is its last."""
    run = await hub.store.run(run_id)
    return run is None or run.status.done
