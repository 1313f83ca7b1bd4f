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
from protocols.keys import entry_order
from protocols.states import RunStatus

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
    fanout: EventFanout, run_id: str, after: str, stopping: asyncio.Event, client: str,
    max_s: float,
) -> AsyncIterator[RunEvent]:  # fmt: skip
    """The run's events after entry `after`; ends after the run's final event, on shutdown,
    when the client falls too far behind, or after `max_s` (the client resumes from its
    Last-Event-ID). A final event that later ones follow (a retry ran the run again) does
    not end it."""
    deadline = time.monotonic() + max_s
    store = fanout.store
    async with fanout.follow(run_id, client) as sub:
        last = after
        while True:  # replay what is there (the live queue fills meanwhile)
            batch = await store.events(run_id, last, count=BATCH)
            for n, event in enumerate(batch, 1):
                last = event.id
                yield RunEvent(event.id, _public(event.data))
                if finishes(event.data) and n == len(batch) and await _ended(store, run_id):
                    return
            if len(batch) < BATCH:
                break
        while not stopping.is_set():  # live: woken by new events, an end, or the deadline
            try:
                new = await asyncio.wait_for(_next(sub.queue), deadline - time.monotonic())
            except TimeoutError:
                return  # at the limit: the client resumes from its Last-Event-ID
            if new is None:
                return  # ended: the hub is stopping, the run is gone, or the client is behind
            if last != "0-0" and entry_order(new.id) <= entry_order(last):
                continue  # already sent by the replay
            last = new.id
            yield RunEvent(new.id, _public(new.data))
            if finishes(new.data) and sub.queue.empty() and await _ended(store, run_id):
                return


async def _next(queue: asyncio.Queue[RunEvent | None]) -> RunEvent | None:
    return await queue.get()


async def _ended(store: StateStore, run_id: str) -> bool:
    """The run is over (or gone): its final event is its last."""
    run = await store.run(run_id)
    return run is None or run.status.done
