"""GET /v1/wiring: the live wiring map as JSON, or `?format=mermaid` as a flowchart."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from hub.api import wiring_map
from hub.api.deps import AgentsDep, HubDep

router = APIRouter(prefix="/wiring", tags=["wiring"])


@router.get(
    "",
    response_class=JSONResponse,
    responses={200: {"content": {"application/json": {}, "text/plain": {}}}},
)
async def wiring(
    hub: HubDep,
    agents: AgentsDep,
    format: Annotated[Literal["json", "mermaid"], Query()] = "json",
) -> Response:
    docs: list[dict[str, Any]] = []
    for name in await hub.cuelists.names():
        described = await hub.cuelists.describe(name)
        doc = described.versions[0].cuelist
        if doc is not None:
            docs.append(doc)
    data = wiring_map.build(await agents.describe(), docs)
    if format == "mermaid":
        return PlainTextResponse(wiring_map.mermaid(data))
    return JSONResponse(data)
