"""Starting runs on a real server: a batch of starts looks its runs up in one round trip,
and a start served twice (sent twice, or again for a run Redis holds) starts nothing new."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub import commands as c
from hub.service import Hub
from hub.store.state import StateStore
from protocols.canonical import canonical_json
from protocols.errors import Unreachable
from protocols.ids import new_id
from protocols.settings import Settings
from protocols.validation import load_cuelist
from specialists.builtin.echo import Echo
from tests.helpers import eventually
from tests.hub.running import running_hub

pytestmark = pytest.mark.redis
PLAIN = "cuelist: plain\ncues:\n  - {id: ONLY, target_agents: [s-echo]}\n"


@pytest.fixture
async def echo(settings: Settings) -> AsyncIterator[None]:
    agent = Echo("s-echo", settings=settings, concurrency=4)
    task = asyncio.create_task(agent.run())
    try:
        yield
    finally:
        agent.stop()
        await asyncio.wait_for(task, 15)


async def _stored(hub: Hub) -> str:
    parsed, version = load_cuelist(PLAIN)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), PLAIN)
    return version


async def _run_events(hub: Hub, run_id: str) -> list[dict[str, Any]]:
    client: Any = hub.transport._client
    entries = await client.xrange(hub.settings.keys.run_events(run_id))
    return [json.loads(fields[b"e"]) for _, fields in entries]


async def test_a_start_sent_twice_in_one_batch_starts_one_run(
    settings: Settings, echo: None
) -> None:
    async with running_hub(settings, lead=False) as hub:
        version = await _stored(hub)
        run_id = new_id()
        start = c.StartRun(cuelist="plain", version=version, run_id=run_id)
        # both queued before the leader reads: one batch, looked up at once, served together
        ids = [await hub.commands.send(start), await hub.commands.send(start)]
        await asyncio.wait_for(hub.leading.wait(), 10)
        replies = [await hub.commands.answer(start, command_id, 10) for command_id in ids]
        assert {r.run_id for r in replies} == {run_id}

        async def done() -> bool:
            run = await hub.store.run(run_id)
            return run is not None and run.status.value == "success"

        await eventually(done, 10, message="the run succeeds")
        run = await hub.store.run(run_id)
        assert run is not None and len(run.cues["ONLY"].gos) == 1
        events = await _run_events(hub, run_id)
        assert [e["status"] for e in events if e["type"] == "run"].count("running") == 1


async def test_a_start_for_a_run_redis_holds_answers_it_and_starts_nothing(
    settings: Settings, echo: None
) -> None:
    run_id = new_id()
    async with running_hub(settings, lead=False) as hub:
        await asyncio.wait_for(hub.leading.wait(), 10)
        version = await _stored(hub)
        start = c.StartRun(cuelist="plain", version=version, run_id=run_id)
        await hub.commands.call(start)

        async def done() -> bool:
            run = await hub.store.run(run_id)
            return run is not None and run.status.value == "success"

        await eventually(done, 10, message="the run succeeds")
        before = await _run_events(hub, run_id)
    async with running_hub(
        settings, lead=False
    ) as hub:  # a new leader: the ended run is not in its memory
        await asyncio.wait_for(hub.leading.wait(), 10)
        assert run_id not in hub.partitions[0].driver.engine.runs
        reply = await hub.commands.call(start)
        assert (reply.run_id, reply.status) == (run_id, "success")
        assert await _run_events(hub, run_id) == before  # nothing started again


async def test_a_batch_whose_look_up_loses_redis_is_served_when_it_comes_back(
    settings: Settings, echo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's one look-up fails (Redis unreachable): its starts stay pending, are read
    again and served, and the run starts once."""
    failed: list[list[str]] = []
    real = StateStore.stored_runs

    async def stored_runs(store: StateStore, run_ids: list[str]) -> set[str]:
        if not failed:
            failed.append(list(run_ids))
            raise Unreachable("Redis went away mid-look-up")
        return await real(store, run_ids)

    monkeypatch.setattr(StateStore, "stored_runs", stored_runs)
    async with running_hub(settings, lead=False) as hub:
        await asyncio.wait_for(hub.leading.wait(), 10)
        version = await _stored(hub)
        run_id = new_id()
        reply = await hub.commands.call(c.StartRun(cuelist="plain", version=version, run_id=run_id))
        assert reply.run_id == run_id and failed == [[run_id]]

        async def done() -> bool:
            run = await hub.store.run(run_id)
            return run is not None and run.status.value == "success"

        await eventually(done, 10, message="the run succeeds")
        events = await _run_events(hub, run_id)
        assert [e["status"] for e in events if e["type"] == "run"].count("running") == 1
