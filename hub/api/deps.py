"""Dependencies: the hub from the lifespan state, the API key check, and a run by id."""

from __future__ import annotations

import asyncio
import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from hub.engine.state import RunState
from hub.registry import Registry
from hub.service import Hub
from protocols.errors import NotFound

_bearer = HTTPBearer(auto_error=False, description="CALLBOARD_API_KEY, when the hub has one")


def get_hub(request: Request) -> Hub:
    hub: Hub = request.state.hub
    return hub


def get_stopping(request: Request) -> asyncio.Event:
    stopping: asyncio.Event = request.state.stopping
    return stopping


def get_agents(request: Request) -> Registry:
    agents: Registry = request.state.agents
    return agents


async def require_api_key(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """With CALLBOARD_API_KEY set, `Authorization: Bearer <key>` (compared in constant time)."""
    expected: str | None = request.state.api_key
    if not expected:
        return
    given = credentials.credentials if credentials else ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong API key (Authorization: Bearer <CALLBOARD_API_KEY>)",
            headers={"WWW-Authenticate": "Bearer"},
        )


HubDep = Annotated[Hub, Depends(get_hub)]
StoppingDep = Annotated[asyncio.Event, Depends(get_stopping)]
AgentsDep = Annotated[Registry, Depends(get_agents)]
RunId = Annotated[str, Path(min_length=1, max_length=200, description="a run id")]


async def get_run(hub: HubDep, run_id: RunId) -> RunState:
    run = await hub.store.run(run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    return run


RunDep = Annotated[RunState, Depends(get_run)]
