"""`Idempotency-Key` for POST /v1/runs: SET NX claims the key; every later request gets its run.

The first request stores `{run_id, request fingerprint}` under the key (for PENDING_TTL_S)
before it asks for the run; the leader makes the key name the run for a day in the run's
own write. A concurrent or later request with the same key and body waits until that run
exists and answers with its id; the same key with another body is a 409. The key is let go
only when the engine refused the start (the run certainly does not exist); after a 503
(no leader, Redis refusing writes) it stays, so a retry gets the same run once the queued
command lands, and a command that was lost frees the key when PENDING_TTL_S runs out.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from hub.service import Hub
from hub.store.idempotency import IdempotencyHold
from protocols.errors import Conflict, TransportError

POLL_S = 0.02


def fingerprint(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


async def claim(hub: Hub, key: str, run_id: str, request: str) -> str | None:
    """Claim `key` for `run_id`; None when claimed, else the run id that holds it."""
    store = hub.stores.idempotency
    hold = IdempotencyHold(run_id=run_id, request=fingerprint(request))
    if await store.claim(key, hold):
        return None
    held = await store.get(key)
    if held is None:  # the holder failed and let go just now: try again
        return await claim(hub, key, run_id, request)
    if held.request != hold.request:
        raise Conflict(f"Idempotency-Key {key!r} was used with a different request")
    return held.run_id


async def release(hub: Hub, key: str, run_id: str) -> None:
    """Let go of a key whose run the engine refused (only if it still names that run)."""
    await hub.stores.idempotency.release(key, run_id)


async def wait_for_run(hub: Hub, key: str, run_id: str, timeout_s: float) -> bool:
    """Wait until the holder's run exists (True) or the holder let go of the key (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await hub.store.run(run_id) is not None:
            return True
        held = await hub.stores.idempotency.get(key)
        if held is None or held.run_id != run_id:
            return False
        await asyncio.sleep(POLL_S)
    raise TransportError(f"run {run_id} for Idempotency-Key {key!r} did not start in time")
