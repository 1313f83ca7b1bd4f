"""Follow a run's event stream: replay it (XRANGE), then take its new events from the shared
reader (hub.fanout) until it ends. Every read uses the fanout's own connections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from hub.api.schemas import ts
from hub.fanout import EventFanout
from hub.store.state import RunEvent, StateStore
from protocols.states import RunStatus


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
    fanout: EventFanout, run_id: str, after: str, stopping: asyncio.Event, client: str,
    max_s: float,
) -> AsyncIterator[RunEvent]:  # fmt: skip
    """The run's events after entry `after`; ends after the run's final event, on shutdown,
    when the client falls too far behind, or after `max_s` (the client resumes from its
    Last-Event-ID). A final event that later ones follow (a retry ran the run again) does
    not end it."""
    deadline = time.monotonic() + max_s
    async with fanout.follow(run_id, client) as sub:
        async for batch in fanout.batches(sub, after, deadline, stopping):
            for event in batch.events:
                yield RunEvent(event.id, _public(event.data))
            last = batch.events[-1] if batch.events else None
            if last is not None and finishes(last.data) and await _ended(fanout.store, run_id):
                return


async def _ended(store: StateStore, run_id: str) -> bool:
    """The run is over (or gone): its final event is its last."""
    run = await store.run(run_id)
    return run is None or run.status.done
