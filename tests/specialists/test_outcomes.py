"""One outcome per attempt, written with its entry's XACK and its done-marker in one write,
whatever happens around it: a replica dying, a consumer group replayed, a standdown."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from protocols.codec import Envelope, decode
from protocols.messages import MessageType
from protocols.payloads import CoordStanddown
from protocols.settings import Settings
from protocols.transport import Transport
from tests.helpers import eventually
from tests.specialists.conftest import AGENT, HubSide, Starter
from tests.specialists.sample import Scripted

pytestmark = [pytest.mark.redis, pytest.mark.usefixtures("scripted")]

M = MessageType
OUTCOMES = (M.STATUS_COMPLETED, M.STATUS_FAILED)


class _Writes(Transport):
    """Every write goes alone (none rides a read) and is kept: (message types, XACKed entry
    ids, raw commands). With `hold` cleared, the reply to a write holding a completion comes
    back only once it is set again (the write is applied at once: a slow network)."""

    written: list[tuple[list[MessageType], list[str], list[list[Any]]]]
    hold: asyncio.Event

    @property
    def writes_ride_reads(self) -> bool:
        return False

    async def publish_many(self, items: Any, *, ack: Any = (), **kw: Any) -> Any:
        types = [(decode(m) if isinstance(m, bytes) else m).message_type for _, m in items]
        self.written.append((types, [d.entry_id for d in ack], [list(c) for c in kw["then"]]))
        result = await super().publish_many(items, ack=ack, **kw)
        if M.STATUS_COMPLETED in types:
            await self.hold.wait()
        return result


@pytest.fixture
async def writes(settings: Settings) -> AsyncIterator[_Writes]:
    """Set up before the `start` fixture, so closed after the replicas it started stop."""
    made = _Writes.from_url(settings.redis_url, settings.keys)
    made.written, made.hold = [], asyncio.Event()
    made.hold.set()
    yield made
    made.hold.set()
    await made.close()


HOW = {  # an attempt's outcome other than a completion: the GO's action, and its error
    "failed": ({"boom": True}, "ValueError: boom"),
    "rejected": ({"reject": "bad input"}, "rejected: bad input"),
    "gave up": ({"retries": 10}, "gave up after 2 tries: try 2"),
    "stood down": ({"block": True}, "stood down: run cancelled"),
}


async def _fail_attempt(hub: HubSide, how: str) -> Envelope:
    """Send a GO of CUE-1 that ends `how`; return its status.failed once written."""
    action, error = HOW[how]
    await hub.go("CUE-1", **action)
    if how == "stood down":
        await hub.wait(M.STATUS_STARTED, "CUE-1")
        await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="CUE-1", reason="run cancelled"))
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert failed.payload.error == error
    return failed


@pytest.mark.parametrize("how", list(HOW))
async def test_every_outcome_is_one_write_with_its_xack_and_done_marker(
    writes: _Writes, start: Starter, hub: HubSide, settings: Settings, how: str
) -> None:
    """A failure, a rejection, a Retry given up and a standdown are written as a completion
    is: the outcome, the XACK of the GO's entry and the attempt's done-marker in one MULTI.
    On the code before, the XACK (and the rejection) went in a later write, and no marker
    at all: a replica dying between them left the GO pending, and the replica that took it
    over ran the attempt again and reported it twice."""
    few = settings.model_copy(update={"max_deliveries": 2})
    await start(Scripted, transport=writes, settings_=few)
    await _fail_attempt(hub, how)
    [(go_id, _)] = await hub.t._client.xrange(hub.keys.inbox(AGENT), count=1)
    go_id = go_id.decode()
    [(types, acked, then)] = [w for w in writes.written if M.STATUS_FAILED in w[0]]
    rejects = how in ("rejected", "gave up")
    assert types[-2:] == ([M.STATUS_FAILED, M.STATUS_REJECTED] if rejects else [M.STATUS_FAILED])
    assert go_id in acked
    marker = hub.keys.done(AGENT, "run-1:CUE-1:1:__completed__")
    claim = hub.keys.done(AGENT, "run-1:CUE-1:1:__running__")  # the attempt's, given back
    assert [c[:2] for c in then] == [["SET", marker], ["DEL", claim]]
    assert await hub.t._client.exists(marker)
    assert not await hub.t._client.exists(claim)
    if rejects:  # the hub dead-letters the GO's entry, which the rejection names
        [rejected] = await hub.of(M.STATUS_REJECTED, "CUE-1")
        assert rejected.payload.entry_id == go_id
    await eventually(lambda: _none_pending(hub), message="the GO acknowledged")


@pytest.mark.parametrize("how", list(HOW))
async def test_an_attempt_replayed_after_its_outcome_is_not_run_again(
    start: Starter, hub: HubSide, settings: Settings, how: str
) -> None:
    """A consumer group lost and made again replays every entry of the inbox, the GO's too,
    to a replica that never saw it: its done-marker says the attempt has its outcome, so the
    entry is acknowledged without running. On the code before, only a completion was
    marked: a failed, rejected or stood-down attempt ran again and was reported twice."""
    few = settings.model_copy(update={"max_deliveries": 2})
    r1 = await start(Scripted, "r1", settings_=few)
    await _fail_attempt(hub, how)
    await eventually(lambda: _none_pending(hub), message="the GO acknowledged")
    executed = Scripted.calls.count(("execute", "CUE-1"))
    r1.stop("done")
    await hub.wait(M.STATUS_OFFLINE)
    await start(Scripted, "r2", settings_=few)  # a replica that never handled the GO
    await hub.t._client.xgroup_destroy(hub.keys.inbox(AGENT), AGENT)  # r2 makes it again
    await hub.warning("CUE-2")  # replayed after the GO (and what followed it)
    await hub.wait(M.ACK_WARNING, "CUE-2")
    await eventually(lambda: _none_pending(hub), message="the replayed entries acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == executed
    assert len(await hub.of(M.STATUS_FAILED, "CUE-1")) == 1


async def test_an_entry_replayed_while_in_hand_is_acked_with_its_outcome_only(
    start: Starter, hub: HubSide
) -> None:
    """A consumer group lost and made again while a GO runs replays the GO's entry to the
    replica running it: the same entry, still its first handler's, who renews it and acks
    it with the completion. On the code before, the copy was taken for a duplicate and
    acked at once, and the entry dropped from those the replica renews: a replica dying
    then lost the GO, acknowledged without an outcome."""
    spec = await start(Scripted)
    await hub.go("CUE-1", plain=True, block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    rt = spec._runtime
    [go_id] = list(rt.in_flight)
    await hub.t._client.xgroup_destroy(hub.keys.inbox(AGENT), AGENT)  # the replica remakes it
    await hub.warning("CUE-2")  # replayed after the GO: answered once the GO's copy is handled
    await hub.wait(M.ACK_WARNING, "CUE-2")
    assert list(rt.in_flight) == [go_id]  # still renewed
    assert await hub.pending() == 1  # the GO: not acknowledged before its outcome
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    await eventually(lambda: _none_pending(hub), message="the GO acknowledged")
    assert Scripted.calls.count(("execute", "CUE-1")) == 1
    assert rt.in_flight == {}


async def test_a_standdown_while_the_completion_is_written_adds_no_outcome(
    writes: _Writes, start: Starter, hub: HubSide
) -> None:
    """A standdown handled while the completion's write is on its way (applied, its reply
    not yet back) does not call the work off: the completion is its one outcome. On the
    code before, the standdown cancelled the handler waiting for that write, which still
    landed, and the handler then reported the attempt stood down as well."""
    await start(Scripted, transport=writes)
    await hub.go("CUE-1", plain=True, block=True)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    writes.hold.clear()
    assert Scripted.release is not None
    Scripted.release.set()
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")  # written; the reply held back
    await hub.send(M.COORD_STANDDOWN, CoordStanddown(cue_id="CUE-1", reason="run cancelled"))
    await eventually(lambda: Scripted.stood_down == ["CUE-1"], message="standdown handled")
    writes.hold.set()
    await hub.warning("CUE-2")  # its answer is written after anything the standdown caused
    await hub.wait(M.ACK_WARNING, "CUE-2")
    await eventually(lambda: _none_pending(hub), message="every entry acknowledged")
    outcomes = [m.message_type for m in await hub.out() if m.message_type in OUTCOMES]
    assert outcomes == [M.STATUS_COMPLETED]


async def _none_pending(hub: HubSide) -> bool:
    return await hub.pending() == 0
