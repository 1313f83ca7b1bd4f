"""A run whose first write never landed (refused: the lease was lost between the start's
step and its write) is not a run whose state Redis lost. Before, the next term failed it
("Redis lost its data") from the last term's memory, and the StartRun served again
answered with that failed run: an operator's run ended as it started, on a lease blip
(CI saw it in tests/hub/test_partitions.py on a loaded machine). Now the command served
again makes the run, once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from hub import commands as c
from hub.engine.outbox import Outbox
from hub.store.state import StateStore
from protocols.canonical import canonical_json
from protocols.errors import StaleLeader
from protocols.ids import new_id
from protocols.settings import Settings
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import inbox, running_hub

pytestmark = pytest.mark.redis
WAITS = "cuelist: unwritten\ncues:\n  - {id: A, target_agents: [nobody], conditions: [never]}\n"


async def test_a_start_whose_write_was_refused_is_made_again_not_failed_as_lost(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_hub(settings, lease_ms=1500) as hub:
        parsed, version = load_cuelist(WAITS)
        await hub.cuelists.put(parsed, version, canonical_json(parsed), WAITS)
        run_id = new_id()
        store, real = hub.driver.store, hub.driver.store.commit
        refused: list[str] = []

        async def commit(out: Outbox, *args: Any, **kw: Any) -> Any:
            if run_id in out.started and not refused:
                refused.append(run_id)
                raise StaleLeader("the lease moved (this test)")
            return await real(out, *args, **kw)

        store.commit = commit  # type: ignore[method-assign]
        caplog.set_level(logging.ERROR)
        start = c.StartRun(cuelist="unwritten", version=version, run_id=run_id)
        reply = await hub.commands.call(start, timeout_s=30)
        assert refused == [run_id]  # its first write was refused, the command served again
        assert reply.run_id == run_id and reply.status == "holding", reply
        run = await hub.store.run(run_id)
        assert run is not None and run.status.value == "holding"
        assert run.cues["A"].state.value == "waiting"
        assert "state is gone" not in caplog.text


SCHEDULED = (
    'cuelist: every\nschedule: "* * * * * *"\noverlap: skip\n'
    "cues:\n  - {id: A, target_agents: [nobody], ack_timeout_s: 60}\n"
)


async def test_a_start_whose_write_the_ending_term_cut_short_is_not_failed_as_lost(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The term ends (a yield; a lost lease alike) while a scheduled start's write is on
    its way: the task writing it is cancelled, not refused. Before, that run was not
    counted as unwritten: the next term on this hub failed it as lost ("Redis lost its
    data") and told its agent to stand down for a WARNING never sent (found by review)."""
    real = StateStore.commit
    held: list[str] = []
    cancelled = asyncio.Event()

    async def commit(self: StateStore, out: Outbox, engine: Any, lease: str) -> None:
        if out.started and not held:  # the first scheduled start: its write never goes out
            held.extend(out.started)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
        await real(self, out, engine, lease)

    monkeypatch.setattr(StateStore, "commit", commit)
    async with running_hub(settings, lease_ms=1000) as hub:
        parsed, version = load_cuelist(SCHEDULED)
        await hub.cuelists.put(parsed, version, canonical_json(parsed), SCHEDULED)
        await eventually(lambda: held, 10, message="a scheduled start is being written")
        hub.partitions[0].yielding.set()  # the term ends while the write is in flight
        async with asyncio.timeout(10):
            await cancelled.wait()
        # the same hub leads again; a later tick starts a run that is written
        written = await eventually(
            lambda: _written_runs(hub, exclude=held[0]), 15, message="a later start written"
        )
        await hub.cuelists.delete("every")
        assert written and await hub.store.run(held[0]) is None
        assert not [m for m in await inbox(hub, "nobody") if m.run_id == held[0]]


async def _written_runs(hub: Any, exclude: str) -> list[str]:
    return [i for i in await hub.store.recent_run_ids() if i != exclude]
