"""GET /metrics: this hub's Prometheus metrics, in the text exposition format."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hub.api.deps import HubDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def prometheus(hub: HubDep) -> Response:
    return Response(generate_latest(hub.metrics.registry), media_type=CONTENT_TYPE_LATEST)
