"""The journaled commit of a Redis Cluster: a step spanning slots lands once, survives a
failed apply (replayed by the next term), and keeps an old leader's late apply out."""

from __future__ import annotations

from typing import Any

import pytest

from hub.engine.driver import Driver
from hub.store import CuelistStore, StateStore
from hub.store.commit import FencedCommit
from hub.store.journal import JournaledCommit
from hub.store.layout import Op
from hub.store.lease import LeaseStore
from hub.store.ops import COMMIT_ID_TTL_MS, by_slot, pack
from protocols.canonical import canonical_json
from protocols.errors import StaleLeader
from protocols.keys import Keys, key_slot
from protocols.transport import Storage
from protocols.validation import load_cuelist

pytestmark = pytest.mark.redis


def step(keys: Keys, n: int = 6) -> list[Op]:
    """A step over many slots: run hashes, inboxes, the active set, the run index."""
    ops: list[Op] = []
    for i in range(n):
        ops.append(["HSET", keys.run(f"r{i}"), "h", f"header-{i}"])
        ops.append(["XADD", keys.inbox(f"agent-{i}"), "*", "m", f"go-{i}"])
        ops.append(["SADD", keys.active_runs(), f"r{i}"])
        ops.append(["ZADD", keys.all_runs, "NX", str(i), f"r{i}"])
    return ops


async def lengths(redis: Any, keys: Keys, n: int = 6) -> list[int]:
    return [await redis.xlen(keys.inbox(f"agent-{i}")) for i in range(n)]


async def leftovers(redis: Any, keys: Keys) -> list[bytes]:
    """Journal entries and applied markers still there (none once a step is done)."""
    found = [k async for k in redis.scan_iter(match=f"{keys.prefix}hub:*applied*")]
    return found + [e[0] for e in await redis.xrange(keys.journal())]


async def test_a_step_over_many_slots_lands_once(cluster_redis: Any, keys: Keys) -> None:
    commit = FencedCommit(Storage(cluster_redis), keys)
    assert commit.journal is not None  # a cluster: the journaled commit
    await cluster_redis.set(keys.leader(), "hub-a:7")
    ops = step(keys)
    assert len(by_slot(ops)) >= 6
    await commit.journal(ops, "hub-a:7")
    assert await lengths(cluster_redis, keys) == [1] * 6
    assert await cluster_redis.hget(keys.run("r3"), "h") == b"header-3"
    assert await cluster_redis.scard(keys.active_runs()) == 6
    assert await cluster_redis.zcard(keys.all_runs) == 6
    assert await leftovers(cluster_redis, keys) == []
    for slot in by_slot(ops):  # every slot it applied in knows the token
        assert await cluster_redis.get(keys.slot_fence(slot)) == b"7"


async def test_a_stale_leader_journals_nothing(cluster_redis: Any, keys: Keys) -> None:
    journal = JournaledCommit(Storage(cluster_redis), keys)
    await cluster_redis.set(keys.leader(), "hub-b:8")
    with pytest.raises(StaleLeader, match="STALE"):
        await journal(step(keys), "hub-a:7")
    assert await lengths(cluster_redis, keys) == [0] * 6
    assert await leftovers(cluster_redis, keys) == []


async def test_a_step_journaled_is_not_called_refused_once_the_lease_moved(
    cluster_redis: Any, keys: Keys
) -> None:
    """Its reply lost, the lease moved before the retry: the retry gets the entry the step
    was journaled as under the lease then, not STALE (which says it is applied nowhere)."""
    journal = JournaledCommit(Storage(cluster_redis), keys)
    await cluster_redis.set(keys.leader(), "hub-a:7")
    script_keys = [keys.leader(), keys.commit("c1"), journal.journal_key]
    args = ["hub-a:7", COMMIT_ID_TTL_MS, "c1", pack(step(keys))]
    entry = await journal._journal(script_keys, args)
    await cluster_redis.set(keys.leader(), "hub-b:8")
    assert await journal._journal(script_keys, args) == entry
    assert await cluster_redis.xlen(journal.journal_key) == 1


async def _fail_half(journal: JournaledCommit, ops: list[Op], lease: str) -> list[int]:
    """Journal `ops`, apply only half of its slots and fail: the slots not applied."""
    real = journal._apply_group
    slots = list(by_slot(ops))
    missed = slots[len(slots) // 2 :]

    async def flaky(slot: int, *args: Any) -> Any:
        if slot in missed:
            raise ConnectionError("node lost mid-apply")
        return await real(slot, *args)

    journal._apply_group = flaky  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await journal(ops, lease)
    journal._apply_group = real  # type: ignore[method-assign]
    return missed


async def test_a_failed_apply_is_replayed_once_by_the_next_term(
    cluster_redis: Any, keys: Keys
) -> None:
    db = Storage(cluster_redis)
    old, new = JournaledCommit(db, keys), JournaledCommit(db, keys)
    await cluster_redis.set(keys.leader(), "hub-a:7")
    ops = step(keys)
    await _fail_half(old, ops, "hub-a:7")
    applied = await lengths(cluster_redis, keys)
    assert 0 < sum(applied) < 6  # half landed, the step is in the journal
    assert len(await cluster_redis.xrange(keys.journal())) == 1

    await cluster_redis.set(keys.leader(), "hub-b:8")  # the next term
    assert await new.replay("hub-b:8") == 1
    assert await lengths(cluster_redis, keys) == [1] * 6  # every XADD once, none twice
    assert await cluster_redis.zcard(keys.all_runs) == 6
    assert await leftovers(cluster_redis, keys) == []
    assert await new.replay("hub-b:8") == 0


async def test_an_old_leaders_late_apply_is_refused(cluster_redis: Any, keys: Keys) -> None:
    """The old leader froze between journal and apply; the new one replayed the step and
    wrote on. The old leader's late apply of the same step is refused in every slot."""
    db = Storage(cluster_redis)
    old, new = JournaledCommit(db, keys), JournaledCommit(db, keys)
    await cluster_redis.set(keys.leader(), "hub-a:7")
    ops = step(keys)
    missed = await _fail_half(old, ops, "hub-a:7")
    [(_, fields)] = await cluster_redis.xrange(keys.journal())
    commit_id = fields[b"c"].decode()
    await cluster_redis.set(keys.leader(), "hub-b:8")
    await new.replay("hub-b:8")
    await cluster_redis.delete(keys.run("r0"))  # the new leader wrote on since
    groups = by_slot(ops)
    for slot in missed:
        with pytest.raises(StaleLeader, match="newer leader"):
            await old._apply_group(slot, commit_id, groups[slot], 7)
    assert await lengths(cluster_redis, keys) == [1] * 6
    assert not await cluster_redis.exists(keys.run("r0"))  # not written back by the old one


async def test_a_new_leader_replays_before_it_loads(cluster_redis: Any, keys: Keys) -> None:
    """The old leader journaled a run's start but its apply failed where the run's state
    lives: the run is nowhere yet. The next leader's load replays it first, so it resumes
    the run, and the WARNING went to each inbox once."""
    cuelists = CuelistStore(Storage(cluster_redis), keys)
    model, version = load_cuelist(
        {"cuelist": "two", "cues": [{"id": "A", "target_agents": ["a", "b"]}]}
    )
    await cuelists.put(model, version, canonical_json(model), None)
    await cluster_redis.set(keys.leader(), "hub-a:1")
    old_store = StateStore(Storage(cluster_redis), keys)
    old = Driver(old_store, cuelists, keys, lambda: "hub-a:1")
    journal = old_store._commit.journal
    assert journal is not None
    real = journal._apply_group
    run_slot = key_slot(keys.run("r1"))

    async def flaky(slot: int, *args: Any) -> Any:
        if slot == run_slot:
            raise ConnectionError("node lost mid-apply")
        return await real(slot, *args)

    journal._apply_group = flaky  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await old.start_run("two", None, "r1", {}, False)
    assert not await cluster_redis.exists(keys.run("r1"))
    assert len(await cluster_redis.xrange(keys.journal())) == 1

    await cluster_redis.set(keys.leader(), "hub-b:2")
    new = Driver(StateStore(Storage(cluster_redis), keys), cuelists, keys, lambda: "hub-b:2")
    assert await new.load() == 1  # the run the journal held, resumed
    assert "r1" in new.engine.runs
    assert [await cluster_redis.xlen(keys.inbox(a)) for a in ("a", "b")] == [1, 1]
    assert await leftovers(cluster_redis, keys) == []


async def test_tokens_outgrow_the_slot_fences_after_the_counter_is_lost(
    cluster_redis: Any, keys: Keys
) -> None:
    """The fence counter's node lost its data (no persistence): the slots' fences still hold
    the old tokens. The next token is still above them (at least the time in ms), so the
    next leader's writes are not refused for ever."""
    lease = LeaseStore(Storage(cluster_redis), keys)
    first = await lease.next_token()
    second = await lease.next_token()
    assert first >= 1_700_000_000_000 and second > first  # the time in ms, or one more
    journal = JournaledCommit(Storage(cluster_redis), keys)
    await cluster_redis.set(keys.leader(), f"hub-a:{second}")
    await journal(step(keys), f"hub-a:{second}")
    await cluster_redis.delete(keys.fence(), keys.leader())  # the {p0} node came back empty
    token = await lease.next_token()
    assert token > second
    await cluster_redis.set(keys.leader(), f"hub-b:{token}")
    await journal(step(keys), f"hub-b:{token}")  # not refused by the slots' fences
    assert await lengths(cluster_redis, keys) == [2] * 6


async def test_one_server_keeps_its_one_script(real_redis: Any, keys: Keys) -> None:
    assert FencedCommit(Storage(real_redis), keys).journal is None
