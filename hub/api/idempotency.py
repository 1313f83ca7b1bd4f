"""`Idempotency-Key` for POST /v1/runs: SET NX claims the key; every later request gets its run.

The first request stores `{run_id, request fingerprint}` under the key (with a TTL) before it
starts the run; a concurrent or later request with the same key and body waits until that
run exists and answers with its id; the same key with another body is a 409.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

from hub.service import Hub
from protocols.errors import Conflict, TransportError

TTL_S = 24 * 3600
POLL_S = 0.02


def fingerprint(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


async def claim(hub: Hub, key: str, run_id: str, request: str) -> str | None:
    """Claim `key` for `run_id`; None when claimed, else the run id that holds it."""
    name = hub.keys.idempotency(key)
    value = json.dumps({"run_id": run_id, "request": fingerprint(request)})
    if await hub.transport.client.set(name, value, nx=True, ex=TTL_S):
        return None
    raw = await hub.transport.client.get(name)
    if raw is None:  # the holder failed and let go just now: try again
        return await claim(hub, key, run_id, request)
    held = json.loads(raw)
    if held["request"] != fingerprint(request):
        raise Conflict(f"Idempotency-Key {key!r} was used with a different request")
    return str(held["run_id"])


async def release(hub: Hub, key: str, run_id: str) -> None:
    """Let go of a key whose run could not start (only if it still names that run)."""
    name = hub.keys.idempotency(key)
    raw = await hub.transport.client.get(name)
    if raw is not None and json.loads(raw)["run_id"] == run_id:
        await hub.transport.client.delete(name)


async def wait_for_run(hub: Hub, key: str, run_id: str, timeout_s: float) -> bool:
    """Wait until the holder's run exists (True) or the holder let go of the key (False)."""
    deadline = time.monotonic() + timeout_s
    name = hub.keys.idempotency(key)
    while time.monotonic() < deadline:
        if await hub.store.run(run_id) is not None:
            return True
        raw = await hub.transport.client.get(name)
        if raw is None or json.loads(raw)["run_id"] != run_id:
            return False
        await asyncio.sleep(POLL_S)
    raise TransportError(f"run {run_id} for Idempotency-Key {key!r} did not start in time")
