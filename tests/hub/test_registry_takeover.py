"""A hub that takes the lead knows the agents that came online while it followed: its
registry is read from Redis as it starts leading, not only as its process starts."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from protocols.contracts import Contract
from protocols.settings import Settings
from specialists.builtin.echo import Echo
from tests.helpers import eventually
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis


async def test_a_hub_that_takes_over_knows_who_came_online_while_it_followed(
    settings: Settings,
) -> None:
    contract = Contract(provides=("code_review",), labels={"gpu": True})
    agent = Echo("late-echo", settings=settings, contract=contract)
    async with contextlib.AsyncExitStack() as later, contextlib.AsyncExitStack() as sooner:
        first = await sooner.enter_async_context(running_hub(settings, lease_ms=600))
        second = await later.enter_async_context(running_hub(settings, lead=False, lease_ms=600))
        assert not second.leading.is_set()
        task = asyncio.create_task(agent.run())  # online while `second` only follows
        try:
            await eventually(lambda: "late-echo" in first.registry.online(), 10)
            assert "late-echo" not in second.registry.agents
            await sooner.aclose()  # the leader stops; `second` takes over
            await asyncio.wait_for(second.leading.wait(), 10)
            # known at once, contract and all: not only once the agent speaks again
            assert second.registry.contract_of("late-echo") == agent.contract
            online = second.registry.online()["late-echo"]
            assert "code_review" in online.provides and online.labels["gpu"] is True
        finally:
            agent.stop()
            await asyncio.wait_for(task, 15)
