"""GET /healthz: 200 when the hub runs and Redis answers, else 503 (no API key needed)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from hub.api.deps import HubDep
from hub.api.schemas import HealthPublic
from protocols.errors import TransportError

router = APIRouter(tags=["health"])
PING_TIMEOUT_S = 2.0


@router.get("/healthz", response_model=HealthPublic, responses={503: {"model": HealthPublic}})
async def healthz(hub: HubDep, request: Request) -> JSONResponse:
    try:
        redis_ok = await asyncio.wait_for(hub.transport.ping(), PING_TIMEOUT_S)
    except (TransportError, TimeoutError):
        redis_ok = False
    task: asyncio.Task[None] | None = request.state.hub_task
    hub_ok = task is None or not task.done()
    body = HealthPublic(
        status="ok" if redis_ok and hub_ok else "unavailable",
        hub_id=hub.hub_id,
        leader=hub.leading.is_set(),
        redis=redis_ok,
    )
    return JSONResponse(body.model_dump(), status_code=200 if body.status == "ok" else 503)
