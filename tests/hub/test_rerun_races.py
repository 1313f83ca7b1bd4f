"""A rerun served in one batch with the cancel that ends its source (a batch's commands are
served concurrently; the rerun's step may come while the cancel's write is in flight, or
after it): the source still names its rerun, and the rerun is made. Before, a run was
forgotten once the write that ended it landed, even when a step taken meanwhile had changed
it (the rerun's link), so the next write passed over it and the link was lost; and a rerun
whose step came after the forget was refused 404, for a run that exists."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hub import commands as c
from hub.commands.models import Request
from hub.engine.outbox import Outbox
from hub.service import Hub
from hub.store.commands import FIELD
from protocols.ids import new_id
from protocols.settings import Settings
from tests.helpers import eventually
from tests.hub.running import running_hub, start

pytestmark = pytest.mark.redis
WAITING = """
cuelist: rerun-race
cues:
  - {id: A, target_agents: [nobody], conditions: [never]}
"""


async def _in_one_batch(hub: Hub, *commands: Any) -> list[Any]:
    """Queue `commands` at once (so the leader reads them in one batch); their replies."""
    store = hub.commands.stores[0]
    requests = [Request.model_validate({"command": cmd, "reply_to": store.answers.asker})
                for cmd in commands]  # fmt: skip
    for request in requests:
        store.answers.expect(request.id)
    # one MULTI: a reader blocked on the stream wakes after both (pipelined, it could wake
    # between them)
    await store.db.commands(
        "QUEUE", [("XADD", store.stream, "*", FIELD, r.model_dump_json().encode())
                  for r in requests], transaction=True,
    )  # fmt: skip
    return await asyncio.gather(*(
        hub.commands.answer(cmd, r.id, 20) for cmd, r in zip(commands, requests, strict=True)
    ))  # fmt: skip


def _plan_waits_for(hub: Hub, ready: Callable[[], Awaitable[object]]) -> None:
    """The driver's plan (which a rerun's handler awaits before its step) waits for `ready`."""
    real = hub.driver.plan

    async def plan(name: str, version: str) -> Any:
        await ready()
        return await real(name, version)

    hub.driver.plan = plan  # type: ignore[method-assign]


async def test_a_rerun_stepped_while_its_sources_end_is_written_is_linked(
    settings: Settings,
) -> None:
    async with running_hub(settings, lease_ms=3000) as hub:
        source, rerun = new_id(), new_id()
        await start(hub, WAITING, source)
        entered, stepped = asyncio.Event(), asyncio.Event()
        store, real = hub.driver.store, hub.driver.store.commit

        async def commit(out: Outbox, *args: Any, **kw: Any) -> Any:
            written = await real(out, *args, **kw)
            if source in out.finished and not stepped.is_set():
                # the cancel's write has landed; before the driver hears so, the rerun steps
                entered.set()
                await eventually(lambda: rerun in hub.driver.engine.runs, 10, message="rerun")
                stepped.set()
            return written

        store.commit = commit  # type: ignore[method-assign]
        _plan_waits_for(hub, entered.wait)
        cancelled, made = await _in_one_batch(
            hub, c.Cancel(run_id=source), c.Rerun(run_id=source, new_run_id=rerun)
        )
        assert cancelled.status == "cancelled" and made.rerun_of == source
        assert stepped.is_set()

        async def linked() -> bool:
            stored = await hub.store.run(source)
            return stored is not None and rerun in stored.reruns

        await eventually(linked, 10, message="the source names its rerun")
        await eventually(lambda: source not in hub.driver.engine.runs, 10, message="forgotten")


async def test_a_rerun_stepped_after_its_source_is_forgotten_is_made(settings: Settings) -> None:
    async with running_hub(settings, lease_ms=3000) as hub:
        source, rerun = new_id(), new_id()
        await start(hub, WAITING, source)

        async def forgotten() -> None:
            await eventually(lambda: source not in hub.driver.engine.runs, 10, message="gone")

        _plan_waits_for(hub, forgotten)
        cancelled, made = await _in_one_batch(
            hub, c.Cancel(run_id=source), c.Rerun(run_id=source, new_run_id=rerun)
        )
        assert cancelled.status == "cancelled" and made.rerun_of == source
        stored = await hub.store.run(source)
        assert stored is not None and stored.reruns == [rerun]
