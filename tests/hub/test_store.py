"""The fenced commit: refused under a stale token, applied once even when retried."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hub.store import COMMIT_ID_TTL_MS, StateStore, _flat
from protocols.keys import Keys

pytestmark = pytest.mark.redis


async def _script(store: StateStore, commit_key: str, lease: str, ops: list[list[str]]) -> Any:
    args = [lease, COMMIT_ID_TTL_MS, *_flat(ops)]
    return await store._commit(keys=[store.sk.leader, commit_key], args=args)


async def test_commit_is_fenced_and_applied_once(real_redis: Any, keys: Keys) -> None:
    store = StateStore(real_redis, keys)
    await real_redis.set(store.sk.leader, "hub-a:7")
    stream = keys.inbox("agent")
    go = [["XADD", stream, "*", "m", "{}"]]
    commit_key = keys.state("hub", "commit", "c1")
    assert await _script(store, commit_key, "hub-a:7", go) == 1
    assert await _script(store, commit_key, "hub-a:7", go) == -1  # a retry: not applied again
    assert await real_redis.xlen(stream) == 1
    with pytest.raises(Exception, match="STALE"):
        await _script(store, keys.state("hub", "commit", "c2"), "hub-a:6", go)  # old token
    assert await real_redis.xlen(stream) == 1


async def test_a_new_leader_drops_leases_of_runs_no_longer_running(
    real_redis: Any, keys: Keys
) -> None:
    from hub.cuelists import CuelistStore
    from hub.engine.driver import Driver
    from hub.engine.resources import Claim, ResourceBook
    from protocols.states import ConflictStrategy

    store = StateStore(real_redis, keys)
    book = ResourceBook()
    book.claim(Claim("gone-run", "CUE-1", ("runner",), 5, ConflictStrategy.PRIORITY))
    await real_redis.set(store.sk.resources, json.dumps(book.dump()))
    await real_redis.set(store.sk.leader, "hub-b:2")
    driver = Driver(store, CuelistStore(real_redis, keys), keys, lambda: "hub-b:2")
    await driver.load()
    assert driver.engine.book.holder_of("runner") is None
    saved = json.loads(await real_redis.get(store.sk.resources))
    assert saved["held"] == {}  # and the release is written, fenced like any state


async def test_a_big_run_starts_in_committed_chunks_between_other_steps(
    real_redis: Any, keys: Keys
) -> None:
    """A run of 600 entry cues: its start commits the first chunk of assigns; the backlog
    loop commits the rest, a chunk per fenced write, and each cue is assigned once."""
    import asyncio

    from hub.cuelists import CuelistStore
    from hub.engine.driver import BACKLOG_CHUNK, Driver
    from protocols.canonical import canonical_json
    from protocols.validation import load_cuelist
    from tests.helpers import eventually

    n = 600
    cues = [{"id": f"J{i:03d}", "target_agents": ["w"], "coordination": "direct"} for i in range(n)]
    cuelist, version = load_cuelist(
        {"cuelist": "big", "start": [c["id"] for c in cues], "cues": cues}
    )
    cuelists = CuelistStore(real_redis, keys)
    await cuelists.put(cuelist, version, canonical_json(cuelist), None)
    store = StateStore(real_redis, keys)
    await real_redis.set(store.sk.leader, "hub-a:1")
    driver = Driver(store, cuelists, keys, lambda: "hub-a:1")
    await driver.start_run("big", version, "r1", {}, False)
    assert await real_redis.xlen(keys.inbox("w")) == BACKLOG_CHUNK  # the first chunk, at once
    stop = asyncio.Event()
    loop = asyncio.create_task(driver.run_backlog(stop))
    try:
        await eventually(lambda: _assigned(real_redis, keys), 10, message="every cue assigned")
    finally:
        stop.set()
        await loop
    entries = await real_redis.xrange(keys.inbox("w"))
    cue_ids = [json.loads(fields[b"m"])["cue_id"] for _, fields in entries]
    assert sorted(cue_ids) == [c["id"] for c in cues]  # each once
    (run,) = await store.runs(["r1"])
    assert all(cr.state.value == "go" for cr in run.cues.values())


async def _assigned(client: Any, keys: Keys) -> bool:
    return bool(await client.xlen(keys.inbox("w")) >= 600)


async def _two_target_run(real_redis: Any, keys: Keys) -> tuple[Any, StateStore]:
    """A driver leading on `keys` with run r1 started: cue C, targets a and b, warned."""
    from hub.cuelists import CuelistStore
    from hub.engine.driver import Driver
    from protocols.canonical import canonical_json
    from protocols.validation import load_cuelist

    data = {"cuelist": "two", "cues": [{"id": "C", "target_agents": ["a", "b", "c"]}]}
    cuelist, version = load_cuelist(data)
    cuelists = CuelistStore(real_redis, keys)
    await cuelists.put(cuelist, version, canonical_json(cuelist), None)
    store = StateStore(real_redis, keys)
    await real_redis.set(store.sk.leader, "hub-a:1")
    driver = Driver(store, cuelists, keys, lambda: "hub-a:1")
    await driver.start_run("two", version, "r1", {}, False)
    return driver, store


def _ack(agent: str) -> Any:
    from hub.engine import inputs
    from protocols import payloads as p
    from protocols.codec import make
    from protocols.messages import MessageType as T

    msg = make(T.ACK_WARNING, p.AckWarning(), from_agent=agent, run_id="r1", cue_id="C")
    return lambda e: inputs.handle(e, msg)


def _count_commits(store: StateStore, gate: Any = None) -> list[int]:
    commits: list[int] = []
    real_commit = store.commit

    async def counted(*args: Any) -> None:
        commits.append(1)
        if gate is not None:
            await gate.wait()
        await real_commit(*args)

    store.commit = counted  # type: ignore[method-assign]
    return commits


async def test_a_step_that_sends_nothing_shares_the_next_write(real_redis: Any, keys: Keys) -> None:
    """An ack that leaves its cue waiting returns before any write (the router's XACK rides
    later); it is written within LINGER_S, or with the next step that sends something."""
    from tests.helpers import eventually

    driver, store = await _two_target_run(real_redis, keys)
    commits = _count_commits(store)
    await driver.step(_ack("a"), quiet_may_wait=True)
    assert commits == []  # returned at once: nothing to send
    await eventually(lambda: _target(store, "a", "prepared"), 5, message="written by the linger")
    assert len(commits) == 1
    await driver.step(_ack("b"), quiet_may_wait=True)
    await driver.step(_ack("c"), quiet_may_wait=True)  # completes the phase: STANDBY goes out
    assert len(commits) == 2  # b's ack went with c's
    assert await real_redis.xlen(keys.inbox("c")) == 2  # WARNING, then STANDBY, written


async def test_a_quiet_step_during_the_lingering_write_is_written_too(
    real_redis: Any, keys: Keys
) -> None:
    import asyncio

    from tests.helpers import eventually

    driver, store = await _two_target_run(real_redis, keys)
    gate = asyncio.Event()
    commits = _count_commits(store, gate)
    await driver.step(_ack("a"), quiet_may_wait=True)
    await eventually(lambda: len(commits) == 1, 5, message="the linger's write started")
    await driver.step(_ack("b"), quiet_may_wait=True)  # lands while that write is held
    gate.set()
    # b's step (its XACK, its events) needs a write of its own once the held one is done
    await eventually(lambda: len(commits) == 2, 5, message="a second write")
    await eventually(lambda: _target(store, "b", "prepared"), 5, message="b's ack written")


async def _target(store: StateStore, agent: str, state: str) -> bool:
    (run,) = await store.runs(["r1"])
    return run.cues["C"].targets.get(agent) == state
