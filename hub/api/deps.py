"""Dependencies: the hub from the lifespan state, the API key check, and a run by id."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from hub.desk import session
from hub.engine.state import RunState
from hub.fanout import TooManyStreams
from hub.registry import Registry
from hub.service import Hub
from protocols.errors import NotFound

# What Sec-Fetch-Site says of a page of another origin ("same-origin" and "none", typed or
# bookmarked, are the desk's own; a client that is no browser sends none)
FOREIGN_SITES = frozenset({"cross-site", "same-site"})
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
    """With CALLBOARD_API_KEY set, `Authorization: Bearer <key>` (compared in constant time),
    or the desk's login cookie; a request that changes state with the cookie alone must carry
    the desk's CSRF header. Key or not, a browser's request that changes state from a page
    of another site, or of another origin of this site (another port of 127.0.0.1: "same-
    site"), is refused (Sec-Fetch-Site), so no other page can drive a hub through an
    operator's browser: without a key, a form on any local web app could GO a cue."""
    site = request.headers.get("sec-fetch-site")
    if site in FOREIGN_SITES and request.method not in session.SAFE_METHODS:
        raise HTTPException(status_code=403, detail=f"{site} requests may not change state")
    expected: str | None = request.state.api_key
    if not expected:
        return
    if credentials is None and session.valid(expected, request.cookies.get(session.COOKIE)):
        if not session.csrf_ok(request.method, request.headers):
            raise HTTPException(
                status_code=403,
                detail=f"a request made with the desk's login cookie that changes state must "
                f"carry the {session.CSRF_HEADER} header",
            )
        return
    given = credentials.credentials if credentials else ""
    if not session.key_matches(expected, given):
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


def event_slot(request: Request, hub: HubDep) -> str:
    """Who opens an event stream (the client's address), refused with 503 and Retry-After
    when the hub or this client already has the most streams open it may."""
    client = request.client.host if request.client else "unknown"
    try:
        hub.fanout.admit(client)
    except TooManyStreams as exc:
        raise HTTPException(
            status_code=503, detail=exc.detail, headers={"Retry-After": str(exc.retry_after_s)}
        ) from None
    return client


EventSlotDep = Annotated[str, Depends(event_slot)]
