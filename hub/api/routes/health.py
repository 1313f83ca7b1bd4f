"""GET /healthz: 200 "ok" when the hub runs, Redis takes writes, a hub leads and the loop
keeps time; 503 "degraded" with the reasons, or "unavailable" without Redis or a running
hub. Always names the leader (no API key needed)."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from hub.api.deps import HubDep
from hub.api.schemas import HealthPublic
from hub.health import reasons
from protocols.errors import TransportError

router = APIRouter(tags=["health"])
PING_TIMEOUT_S = 2.0


@router.get("/healthz", response_model=HealthPublic, responses={503: {"model": HealthPublic}})
async def healthz(hub: HubDep, request: Request) -> JSONResponse:
    holder: str | None = None
    holders: list[str | None] = []
    refusal: TransportError | None = None
    try:
        redis_ok = await asyncio.wait_for(hub.transport.ping(), PING_TIMEOUT_S)
        holders = await asyncio.wait_for(hub.members.holders(len(hub.partitions)), PING_TIMEOUT_S)
        holder = holders[0]
        refusal = await asyncio.wait_for(hub.stores.lease.writes_refused(), PING_TIMEOUT_S)
    except (TransportError, TimeoutError):
        redis_ok = False
    task: asyncio.Task[None] | None = request.state.hub_task
    hub_ok = task is None or not task.done()
    leader_id = holder.rsplit(":", 1)[0] if holder else None
    lag_ms = hub.loop_lag.worst_ms()
    why = reasons(
        leader_id=leader_id, leaderless_s=time.monotonic() - hub.leadership.seen_leader_at,
        lease_ms=hub.settings.lease_ms, write_refusal=str(refusal) if refusal else None,
        lag_ms=lag_ms, max_lag_ms=hub.settings.health_max_lag_ms,
    )  # fmt: skip
    now = time.monotonic()
    for part, held_by in zip(hub.partitions[1:], holders[1:], strict=False):
        if held_by is not None:
            part.leadership.seen_leader_at = now
        elif (now - part.leadership.seen_leader_at) * 1000 > hub.settings.lease_ms:
            why.append(f"partition {part.index} has had no leader for "
                       f"{now - part.leadership.seen_leader_at:.1f} s")  # fmt: skip
    if not redis_ok or not hub_ok:
        status = "unavailable"
        why.insert(0, "Redis does not answer" if not redis_ok else "the hub task stopped")
    else:
        status = "degraded" if why else "ok"
    body = HealthPublic(
        status=status, hub_id=hub.hub_id, leader=hub.leading.is_set(), redis=redis_ok,
        leader_id=leader_id, reasons=why, loop_lag_ms=round(lag_ms, 1),
        partitions=[part.index for part in hub.led()],
    )  # fmt: skip
    return JSONResponse(body.model_dump(), status_code=200 if status == "ok" else 503)
