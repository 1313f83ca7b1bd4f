"""The app factory: routers, error handlers, body limit, and a lifespan that runs the hub."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline

from hub.api import errors
from hub.api.deps import require_api_key
from hub.api.gone import ClientGone
from hub.api.hosts import LoopbackHosts
from hub.api.limits import MAX_BODY_BYTES, BodyLimitMiddleware
from hub.api.routes import (
    agent_cards,
    agents,
    broadcasts,
    budgets,
    cuelists,
    deadletters,
    escalations,
    health,
    metrics,
    runs,
    wiring,
)
from hub.api.schemas import CuelistErrorPublic, ErrorPublic
from hub.desk.mount import install as install_desk
from hub.registry import Registry
from hub.service import Hub
from hub.store.members import PartitionsDisagree
from protocols.outage import Outage, is_unreachable, one_line, redacted

log = logging.getLogger(__name__)
# What every secured route may also answer, as errors.py shapes it (documented, so clients
# and schema-driven tests know): no or a wrong key, a body that does not parse, bad input.
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorPublic, "description": "the body could not be parsed"},
    401: {"model": ErrorPublic, "description": "missing or wrong API key"},
    422: {"model": CuelistErrorPublic, "description": "invalid request"},
}
RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 5.0
HEALTHY_RUN_S = 10.0  # a hub.run that lasted this long had Redis: its failure is news
STOP_TIMEOUT_S = 10.0


async def supervise(hub: Hub, stop: asyncio.Event) -> None:
    """Run the hub until `stop`; a crash is logged and retried. Redis out of reach (not up
    yet, restarting, a wrong REDIS_URL) is one line per outage, not a traceback a second,
    and the retries back off; any other crash keeps its traceback."""
    outage = Outage(first_s=RESTART_DELAY_S, max_s=MAX_RESTART_DELAY_S)
    where = redacted(hub.settings.redis_url)
    while not stop.is_set():
        started = time.monotonic()
        delay_s = RESTART_DELAY_S
        try:
            await hub.run(stop)
        except PartitionsDisagree as exc:  # set up unlike the other hubs: retrying won't help
            log.error("hub %s cannot lead: %s", hub.hub_id, exc)
            return
        except Exception as exc:
            if time.monotonic() - started > HEALTHY_RUN_S:
                outage.ok()  # it ran a while: whatever this is, it is a new outage
            if is_unreachable(exc):
                delay_s, say = outage.fail()
                if say:
                    log.error(
                        "hub %s: Redis at %s is unreachable (%s); retrying every %.0f s at most",
                        hub.hub_id, where, one_line(exc), MAX_RESTART_DELAY_S,
                    )  # fmt: skip
            else:
                log.exception("hub %s stopped with an error; restarting", hub.hub_id)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay_s)


def create_app(hub: Hub, *, run_hub: bool = True, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The API of `hub`; with `run_hub` the lifespan also runs the hub (election, engine...)."""
    stopping = asyncio.Event()  # set on shutdown, so live event streams end

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        task = asyncio.create_task(supervise(hub, stopping), name="hub") if run_hub else None
        extras = contextlib.AsyncExitStack()  # what mounted servers run (the MCP server)
        for running in app.state.lifespans:
            await extras.enter_async_context(running())
        try:
            yield {
                "hub": hub,
                "hub_task": task,
                "stopping": stopping,
                "api_key": hub.settings.api_key or None,
                # a registry of its own: describe() reloads from Redis, and must not
                # replace the routing registry's in-memory entries under the router
                "agents": Registry(hub.transport, hub.stores.agents, hub.keys),
            }
        finally:
            stopping.set()
            hub.fanout.end_all()
            await extras.aclose()
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(task, STOP_TIMEOUT_S)
            await hub.close()

    # /docs loads Swagger UI from the fastapi-offline package, not a
    # CDN, so it works on a machine with no internet (as the desk does)
    app: FastAPI = FastAPIOffline(
        title="callboard hub",
        summary="Runs cuelists over Redis Streams: WARNING, STANDBY, GO.",
        version="1",
        lifespan=lifespan,
        swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from elsewhere
        redoc_url=None,  # ReDoc draws its logo from its own CDN: /docs is the offline one
    )
    app.state.stopping = stopping
    app.state.lifespans = []  # context managers the lifespan enters (mounted servers)
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=max_body_bytes)
    app.add_middleware(ClientGone)  # outside the body limit: it sees what the route raised
    if not hub.settings.api_key:
        app.add_middleware(LoopbackHosts)  # outermost: DNS rebinding (hub.api.hosts)
    errors.install(app)
    app.include_router(health.router)
    secured = [Depends(require_api_key)]
    modules = (
        cuelists, runs, budgets, agents, agent_cards, escalations, broadcasts, wiring, deadletters,
    )  # fmt: skip
    for module in modules:
        app.include_router(module.router, prefix="/v1", dependencies=secured, responses=ERRORS)
    app.include_router(metrics.router, dependencies=secured, responses=ERRORS)
    # callboard as an A2A agent (the card, /a2a): imported here, as it calls the routes above
    from hub.a2a.mount import install as install_a2a

    install_a2a(app, hub, stopping)
    from hub.mcp.mount import install as install_mcp  # the MCP server at /mcp, same key

    install_mcp(app, hub)
    install_desk(app)  # the calling desk at `/`, after the API so /v1 routes match first
    return app
