"""Fixtures the hub's tests share: a real hub leading on the test's own key prefix."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hub.service import Hub, HubSettings
from protocols.settings import Settings


@pytest.fixture
async def hub(settings: Settings) -> AsyncIterator[Hub]:
    """A hub leading (a 2 s lease), stopped and closed after the test."""
    hub = Hub(HubSettings(**settings.model_dump(), lease_ms=2000))
    stop = asyncio.Event()
    task = asyncio.create_task(hub.run(stop))
    await asyncio.wait_for(hub.leading.wait(), 10)
    try:
        yield hub
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
        await hub.close()
