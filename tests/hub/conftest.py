"""Fixtures the hub's tests share: a real hub leading on the test's own key prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hub.service import Hub
from protocols.settings import Settings
from tests.hub.running import running_hub


@pytest.fixture
async def hub(settings: Settings) -> AsyncIterator[Hub]:
    """A hub leading (a 2 s lease), stopped and closed after the test."""
    async with running_hub(settings, lease_ms=2000) as hub:
        yield hub
