"""A real hub running for a test, on the test's own key prefix (`running_hub`), a run of a
cuelist's text started on it (`start`) and what an agent's inbox holds (`inbox`), and the
API of a hub that leads nothing in front of it (`api_process`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from hub.api import create_app
from hub.service import Hub, HubSettings
from protocols.canonical import canonical_json
from protocols.codec import Envelope, decode
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType
from protocols.settings import Settings
from protocols.validation import load_cuelist


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


async def start(hub: Hub, text: str, run_id: str, params: dict[str, Any] | None = None) -> None:
    """Store the cuelist `text` on the hub and start a run of it."""
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    await hub.driver.start_run(parsed.cuelist, version, run_id, params or {}, False)


async def inbox(hub: Hub, agent: str, kind: MessageType | None = None) -> list[Envelope]:
    """The messages in an agent's inbox (of one type, when given), oldest first."""
    entries = await hub.transport._client.xrange(hub.keys.inbox(agent))
    found = [decode(f[STREAM_FIELD.encode()]) for _, f in entries]
    return [m for m in found if kind is None or m.message_type is kind]


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
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client
