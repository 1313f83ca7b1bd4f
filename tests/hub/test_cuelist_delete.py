"""Deleting cuelist versions: gone from every listing at once, kept readable for the runs
pinned to them until none is active, and for DELETED_KEPT_S (a start checked and queued
just before the delete), then swept (on a real server)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hub.engine.state import RunState
from hub.store import CuelistStore, StateStore
from hub.store import cuelists as cuelists_module
from protocols.canonical import canonical_json
from protocols.errors import NotFound, TransportError
from protocols.keys import Keys
from protocols.states import RunStatus
from protocols.transport import Storage
from protocols.validation import load_cuelist

pytestmark = pytest.mark.redis


async def _put(store: CuelistStore, note: str) -> str:
    text = f"cuelist: doomed\ndescription: {note}\ncues:\n  - {{id: A, target_agents: [a]}}\n"
    cuelist, version = load_cuelist(text)
    await store.put(cuelist, version, canonical_json(cuelist), text)
    return version


async def test_a_deleted_version_stays_readable_for_its_active_run_then_is_swept(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Storage(real_redis)
    store, fresh, state = CuelistStore(db, keys), CuelistStore(db, keys), StateStore(db, keys)
    old, new = await _put(store, "one"), await _put(store, "two")
    pinned = RunState(run_id="r-old", cuelist="doomed", version=old, created_at=1.0)
    await state.save_run(pinned)
    await real_redis.sadd(keys.active_runs(), "r-old")  # as the engine's commit does

    assert await store.delete("doomed", old) == [old]
    assert [v.version for v in (await store.describe("doomed")).versions] == [new]
    assert not await store.listed("doomed", old) and await store.listed("doomed", new)
    assert (await fresh.get("doomed", old)).description == "one"  # a new leader reads it
    with pytest.raises(NotFound):
        await store.delete("doomed", old)  # deleted already: not listed

    assert await store.delete("doomed") == [new]  # the rest: the cuelist is gone
    with pytest.raises(NotFound):
        await store.describe("doomed")
    assert await store.names() == [] and await store.latest("doomed") is None
    # no run uses it, but a start the API checked before the delete may be served after
    # it (which the stand-in plan then ended on the next load): kept DELETED_KEPT_S
    assert (await CuelistStore(db, keys).get("doomed", new)).description == "two"
    assert await store.sweep_deleted() == 0
    monkeypatch.setattr(cuelists_module, "DELETED_KEPT_S", 0.0)
    assert await store.sweep_deleted() == 1  # `new`: no run uses it
    with pytest.raises(NotFound):
        await CuelistStore(db, keys).get("doomed", new)

    assert await store.sweep_deleted() == 0  # r-old still runs on `old`
    assert (await CuelistStore(db, keys).get("doomed", old)).description == "one"
    pinned.status = RunStatus.SUCCESS
    await state.save_run(pinned)
    await real_redis.srem(keys.active_runs(), "r-old")
    assert await store.sweep_deleted() == 1
    with pytest.raises(NotFound):
        await CuelistStore(db, keys).get("doomed", old)
    assert await real_redis.exists(keys.cuelist("doomed"), keys.deleted_versions) == 0


async def test_storing_a_deleted_version_again_lists_it_and_the_sweep_keeps_it(
    real_redis: Any, keys: Keys
) -> None:
    db = Storage(real_redis)
    store, state = CuelistStore(db, keys), StateStore(db, keys)
    version = await _put(store, "one")
    await state.save_run(RunState(run_id="r1", cuelist="doomed", version=version, created_at=1))
    await real_redis.sadd(keys.active_runs(), "r1")
    await store.delete("doomed")
    assert await _put(store, "one") == version
    await real_redis.srem(keys.active_runs(), "r1")
    assert await store.sweep_deleted() == 0  # nothing waits: storing it again took it back
    assert (await CuelistStore(db, keys).get("doomed", version)).description == "one"
    assert [v.version for v in (await store.describe("doomed")).versions] == [version]


async def test_a_version_stored_again_while_the_sweep_runs_keeps_its_document(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuelists_module, "DELETED_KEPT_S", 0.0)
    await _store_again_while_sweeping(real_redis, keys)


async def test_on_a_cluster_too(
    cluster_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuelists_module, "DELETED_KEPT_S", 0.0)
    await _store_again_while_sweeping(cluster_redis, keys)  # the scripts touch one slot each


async def _store_again_while_sweeping(real_redis: Any, keys: Keys) -> None:
    db = Storage(real_redis)
    store, state = CuelistStore(db, keys), StateStore(db, keys)
    for round_trips in range(12):  # the other hub's store lands at each step of the sweep
        version = await _put(store, "one")
        await state.save_run(RunState(run_id="r1", cuelist="doomed", version=version, created_at=1))
        await real_redis.sadd(keys.active_runs(), "r1")
        await store.delete("doomed")  # kept for r1, which then ends
        await real_redis.srem(keys.active_runs(), "r1")

        async def stored_again(after: int = round_trips) -> None:
            for _ in range(after):
                await real_redis.ping()
            await _put(CuelistStore(db, keys), "one")  # another hub's API

        await asyncio.gather(store.sweep_deleted(), stored_again())
        assert await store.listed("doomed", version), round_trips
        assert (await CuelistStore(db, keys).get("doomed", version)).description == "one"
        assert await real_redis.exists(keys.deleted_versions) == 0


async def test_a_version_stored_again_after_its_delete_is_created_with_its_new_source(
    real_redis: Any, keys: Keys
) -> None:
    """Its document kept DELETED_KEPT_S after the delete, storing it again answered
    `created: false` and kept the old source (only a comment had changed)."""
    store = CuelistStore(Storage(real_redis), keys)
    text = "cuelist: doomed\ncues:\n  - {id: A, target_agents: [a]}\n"
    cuelist, version = load_cuelist(text)
    assert await store.put(cuelist, version, canonical_json(cuelist), text)
    await store.delete("doomed")
    again = "# sent again\n" + text
    assert await store.put(cuelist, version, canonical_json(cuelist), again)  # created
    (stored,) = (await store.describe("doomed")).versions
    assert stored.source == again
    assert not await store.put(cuelist, version, canonical_json(cuelist), text)  # listed
    (stored,) = (await store.describe("doomed")).versions
    assert stored.source == again  # the first source of a listed version stays


class _HsetFails(Storage):
    """A server that fails every single HSET call (a write with no answer, say)."""

    async def command(self, *words: Any) -> Any:
        if words[0] == "HSET":
            raise TransportError("HSET: connection reset")
        return await super().command(*words)


async def test_storing_a_deleted_version_again_is_one_write(real_redis: Any, keys: Keys) -> None:
    """Storing a deleted version again wrote its new source in a second call after the
    MULTI. When that call failed, the version was listed again with its old source, and a
    retry of the put, finding it listed, kept the old one. Now the source goes in the
    MULTI."""
    store = CuelistStore(_HsetFails(real_redis), keys)
    text = "cuelist: doomed\ncues:\n  - {id: A, target_agents: [a]}\n"
    cuelist, version = load_cuelist(text)
    await store.put(cuelist, version, canonical_json(cuelist), text)
    await store.delete("doomed")
    again = "# sent again\n" + text
    try:
        await store.put(cuelist, version, canonical_json(cuelist), again)
    except TransportError:  # the code before: the client sends the put again
        await store.put(cuelist, version, canonical_json(cuelist), again)
    (stored,) = (await store.describe("doomed")).versions
    assert stored.source == again


async def test_a_delete_between_the_puts_look_and_its_write_keeps_the_new_source(
    real_redis: Any, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put looks whether the version is listed, then writes (HSETNX when it is); a
    delete in between left the version listed again with its old source (found by
    review). The new source is written after the MULTI in that case."""
    store = CuelistStore(Storage(real_redis), keys)
    text = "cuelist: doomed\ncues:\n  - {id: A, target_agents: [a]}\n"
    cuelist, version = load_cuelist(text)
    await store.put(cuelist, version, canonical_json(cuelist), text)
    looked = store.listed

    async def then_deleted(name: str, v: str) -> bool:
        listed = await looked(name, v)
        await store.delete(name)  # another operator's delete lands now
        return listed

    monkeypatch.setattr(store, "listed", then_deleted)
    again = "# sent again\n" + text
    assert await store.put(cuelist, version, canonical_json(cuelist), again)  # created
    (stored,) = (await store.describe("doomed")).versions
    assert stored.source == again
