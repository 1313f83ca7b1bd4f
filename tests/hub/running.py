"""A real hub running for a test, on the test's own key prefix (`running_hub`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

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
