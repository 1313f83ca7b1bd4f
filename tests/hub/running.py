"""A real hub running for a test, on the test's own key prefix (`running_hub`), and the API
of a hub that leads nothing in front of it (`api_process`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from hub.api import create_app
from hub.service import Hub, HubSettings
from protocols.settings import Settings


@contextlib.asynccontextmanager
async def running_hub(settings: Settings, lead: bool = True, **extra: Any) -> AsyncIterator[Hub]:
    """A hub on `settings` (with `extra` HubSettings), once it leads when `lead`; stopped
    and closed on the way out."""
    hub = Hub(HubSettings(**{**settings.model_dump(), **extra}))
    stop = asyncio.Event()
    task = asyncio.create_task(hub.run(stop))
    try:
        if lead:
            await asyncio.wait_for(hub.leading.wait(), 10)
        yield hub
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        await hub.close()


@contextlib.asynccontextmanager
async def api_process(settings: Settings, **extra: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The API of a hub that runs no engine (an API process beside the leader), in this
    test's loop: the lifespan's state handed to each request as a server hands it."""
    hub = Hub(HubSettings(**{**settings.model_dump(), **extra}))
    app = create_app(hub, run_hub=False)
    async with app.router.lifespan_context(app) as state:

        async def served(scope: Any, receive: Any, send: Any) -> None:
            scope["state"] = dict(state or {})
            await app(scope, receive, send)

        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://hub") as client:
            yield client
