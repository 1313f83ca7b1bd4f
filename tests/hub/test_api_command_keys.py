"""`Idempotency-Key` on the operator commands (GO, retry, rerun, conditions, cancel, budget,
resolve, broadcast): the same request again is answered as the first was and does nothing
twice, across a 503 whose command landed later; another request with the key is a 409; a
refusal lets the key go. An API process of its own (a hub that does not lead, as a
second API process is) in front of a real leading hub, on a real server and a cluster."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from callboard.embedded_cluster import EmbeddedCluster
from hub import commands as c
from hub.api.idempotency import fingerprint
from hub.api.routes.broadcasts import BroadcastCreate
from hub.service import Hub, HubSettings
from hub.store.idempotency import CommandHold
from protocols.errors import Conflict
from protocols.ids import new_id_in
from protocols.keys import Keys
from protocols.settings import Settings
from tests.helpers import eventually
from tests.hub.armed import armed_run, sent_to_agent
from tests.hub.running import api_process, running_hub

pytestmark = pytest.mark.redis


def _key(name: str) -> dict[str, str]:
    return {"Idempotency-Key": name}


async def test_a_go_answered_503_then_sent_again_with_its_key_is_answered_ok_and_done_once(
    settings: Settings, keys: Keys
) -> None:
    """No hub leads: the GO is queued and answered 503. A leader comes and serves it. The
    operator sends it again with the same key: 200 as the GO was answered (without the
    key it is 409 `not armed: it is warning`), and one WARNING went."""
    async with running_hub(settings, lease_ms=1500) as hub:
        run_id = await armed_run(hub)
    go = f"/v1/runs/{run_id}/cues/FIRST/go"
    async with api_process(settings, command_timeout_s=0.5) as api:
        first = await api.post(go, headers=_key("go-1"))
        assert first.status_code == 503, first.text
        async with running_hub(settings, lease_ms=1500) as hub:

            async def warned() -> bool:
                run = await hub.store.run(run_id)
                return run is not None and run.cues["FIRST"].state.value == "warning"

            await eventually(warned, 10, message="the queued GO served by the new leader")
            again = await api.post(go, headers=_key("go-1"))
            assert again.status_code == 200, again.text
            assert again.json() == {"run_id": run_id, "cue": "FIRST", "state": "warning",
                                    "attempt": 1}  # fmt: skip
            unkeyed = await api.post(go)
            assert unkeyed.status_code == 409 and "not armed" in unkeyed.json()["detail"]
            assert await sent_to_agent(hub, keys) == 1
            run = await hub.store.run(run_id)
            assert run is not None and run.cues["FIRST"].attempt == 1


async def test_a_rerun_sent_many_times_at_once_with_one_key_makes_one_run(
    settings: Settings, keys: Keys
) -> None:
    async with running_hub(settings, lease_ms=1500) as hub, api_process(settings) as api:
        run_id = await armed_run(hub)
        cancelled = await api.post(f"/v1/runs/{run_id}/cancel", headers=_key("cancel-1"))
        assert cancelled.status_code == 200, cancelled.text
        rerun = f"/v1/runs/{run_id}/rerun"
        answers = await asyncio.gather(
            *(api.post(rerun, json={}, headers=_key("rerun-1")) for _ in range(8))
        )
        assert [a.status_code for a in answers] == [201] * 8, [a.text for a in answers]
        assert len({a.json()["run_id"] for a in answers}) == 1
        later = await api.post(rerun, json={}, headers=_key("rerun-1"))
        assert later.json() == answers[0].json()
        source = (await api.get(f"/v1/runs/{run_id}")).json()
        assert source["reruns"] == [answers[0].json()["run_id"]]
        # the cancel's key answers as the cancel did, though the run is cancelled now
        again = await api.post(f"/v1/runs/{run_id}/cancel", headers=_key("cancel-1"))
        assert again.status_code == 200 and again.json() == cancelled.json()
        assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 409


async def test_a_key_used_with_another_request_is_a_409_and_does_nothing(
    settings: Settings, keys: Keys
) -> None:
    async with running_hub(settings, lease_ms=1500) as hub, api_process(settings) as api:
        run_id = await armed_run(hub)
        budget = f"/v1/runs/{run_id}/budget"
        first = await api.post(budget, json={"tokens": 200}, headers=_key("k"))
        assert first.status_code == 200, first.text
        other_body = await api.post(budget, json={"tokens": 500}, headers=_key("k"))
        assert other_body.status_code == 409, other_body.text
        assert "different request" in other_body.json()["detail"]
        other_route = await api.post(f"/v1/runs/{run_id}/cues/FIRST/go", headers=_key("k"))
        assert other_route.status_code == 409, other_route.text
        run = await hub.store.run(run_id)
        assert run is not None and run.budget is not None and run.budget.tokens == 200
        assert run.cues["FIRST"].state.value == "armed"  # the GO was not done
        assert await sent_to_agent(hub, keys) == 0


async def test_a_refused_command_lets_its_key_go(settings: Settings, keys: Keys) -> None:
    """SECOND is not armed (it waits on FIRST): 409, and the key holds nothing, so the same
    key is free for another try; a command that did what it asked keeps its reply a day."""
    async with running_hub(settings, lease_ms=1500) as hub, api_process(settings) as api:
        run_id = await armed_run(hub)
        client = hub.transport._client
        refused = await api.post(f"/v1/runs/{run_id}/cues/SECOND/go", headers=_key("early"))
        assert refused.status_code == 409, refused.text
        assert await client.get(keys.command_idempotency("early")) is None
        went = await api.post(f"/v1/runs/{run_id}/cues/FIRST/go", headers=_key("early"))
        assert went.status_code == 200, went.text
        held = json.loads(await client.get(keys.command_idempotency("early")))
        assert held["reply"] == {"state": "warning", "attempt": 1}
        assert await client.ttl(keys.command_idempotency("early")) > 3600


async def _two_with_one_key(settings: Settings, keys: Keys) -> None:
    """Both queued while no hub leads, so the next leader reads them in one batch."""
    async with running_hub(settings, lease_ms=1500) as hub:
        run_id = await armed_run(hub)
    asker = Hub(HubSettings(**settings.model_dump()))
    try:
        go = c.Go(run_id=run_id, cue_id="FIRST", idempotency_key="twice", request="same")
        other = go.model_copy(update={"request": "another"})
        sent = [await asker.commands.send(command) for command in (go, go, other)]
        async with running_hub(settings, lease_ms=1500) as hub:
            replies = [await asker.commands.answer(go, command_id, 10) for command_id in sent[:2]]
            assert replies == [c.GoReply(state="warning", attempt=1)] * 2
            with pytest.raises(Conflict, match="another request"):
                await asker.commands.answer(other, sent[2], 10)
            assert await sent_to_agent(hub, keys) == 1
    finally:
        await asker.close()


async def test_two_commands_with_one_key_queued_together_are_served_once(
    settings: Settings, keys: Keys
) -> None:
    """The API's claim expired while its command waited, and a retry sent a second: both
    reach the leader in one batch (with a third: the key, another request). The first does
    what it asks and keeps its reply under the key; the second is answered with that reply
    and does nothing; the third is a 409."""
    await _two_with_one_key(settings, keys)


async def test_on_a_cluster_two_commands_with_one_key_are_served_once(
    settings: Settings, keys: Keys, redis_cluster: EmbeddedCluster, cluster_redis: Any
) -> None:
    """The same, the reply kept in another slot than the partition's (the journaled
    commit applies it slot by slot)."""
    await _two_with_one_key(
        Settings(**{**settings.model_dump(), "redis_url": redis_cluster.url}), keys
    )


async def test_with_partitions_a_keyed_pause_reaches_each_once(
    settings: Settings, keys: Keys
) -> None:
    """A pause goes to every partition: each keeps its own reply under the key (`@N`), so
    partition 0's answer does not stand for partition 1's effect. Sent twice with one key,
    every engine is paused and the agents are told once."""
    async with (
        running_hub(settings, lease_ms=1500, partitions=2) as hub,
        api_process(settings, partitions=2) as api,
    ):
        await eventually(lambda: len(hub.led()) == 2, 10, message="leads both partitions")
        body = {"message_type": "broadcast.pause", "payload": {"reason": "keyed"}}
        answers = [await api.post("/v1/broadcasts", json=body, headers=_key("p")) for _ in "ab"]
        assert [a.status_code for a in answers] == [202, 202], [a.text for a in answers]
        assert all(part.driver.engine.paused == "keyed" for part in hub.partitions)
        client = hub.transport._client
        assert await client.get(keys.command_idempotency("p", 1)) is not None
        told = [m[b"m"] for _, m in await client.xrange(keys.broadcast)]
        assert len([m for m in told if b"broadcast.pause" in m]) == 1


async def test_with_partitions_a_keyed_go_on_a_run_of_partition_1_is_answered_again(
    settings: Settings, keys: Keys
) -> None:
    """The GO is served by its run's partition (1); its reply is kept where the API looks
    for it, so the same request again is answered with it (not left waiting: a 503)."""
    async with (
        running_hub(settings, lease_ms=1500, partitions=2) as hub,
        api_process(settings, partitions=2, command_timeout_s=2) as api,
    ):
        await eventually(lambda: len(hub.led()) == 2, 10, message="leads both partitions")
        run_id = await armed_run(hub, new_id_in(1, 2))
        go = f"/v1/runs/{run_id}/cues/FIRST/go"
        first = await api.post(go, headers=_key("p1"))
        assert first.status_code == 200, first.text
        again = await api.post(go, headers=_key("p1"))
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
        assert await sent_to_agent(hub, keys) == 1


async def test_with_partitions_a_pause_sent_again_reaches_the_partition_whose_copy_was_lost(
    settings: Settings, keys: Keys
) -> None:
    """Partition 0 served the keyed pause (its reply kept), partition 1's copy was lost.
    Sent again with the key, it goes to both: partition 0 answers from its reply (does
    nothing again), partition 1 pauses."""
    body = BroadcastCreate(message_type="broadcast.pause", payload={"reason": "again"})
    request = fingerprint(f"/v1/broadcasts\n{body.model_dump_json()}")
    kept = CommandHold(request=request, reply={"sent": "broadcast.pause"})
    async with (
        running_hub(settings, lease_ms=1500, partitions=2) as hub,
        api_process(settings, partitions=2) as api,
    ):
        await eventually(lambda: len(hub.led()) == 2, 10, message="leads both partitions")
        client = hub.transport._client
        await client.set(keys.command_idempotency("lost"), kept.model_dump_json())
        answer = await api.post("/v1/broadcasts", json=body.model_dump(), headers=_key("lost"))
        assert answer.status_code == 202, answer.text
        assert hub.partitions[1].driver.engine.paused == "again"
        assert hub.partitions[0].driver.engine.paused is None  # answered from its reply
        told = [m[b"m"] for _, m in await client.xrange(keys.broadcast)]
        assert not [m for m in told if b"broadcast.pause" in m]


async def test_with_partitions_a_keyed_pause_every_partition_did_is_answered_with_no_leader(
    settings: Settings, keys: Keys, real_redis: Any
) -> None:
    """Once every partition kept its reply to a keyed pause, the same request is answered
    from those replies, with no leader left to ask (it was a 503 before). A partition that
    kept none still has to be asked: with its reply lost and no leader, a 503."""
    body = {"message_type": "broadcast.pause", "payload": {"reason": "kept"}}
    async with api_process(settings, partitions=2, command_timeout_s=1) as api:
        async with running_hub(settings, lease_ms=1500, partitions=2) as hub:
            await eventually(lambda: len(hub.led()) == 2, 10, message="leads both partitions")
            first = await api.post("/v1/broadcasts", json=body, headers=_key("k"))
            assert first.status_code == 202, first.text
            told = await real_redis.xrange(keys.broadcast)
        again = await api.post("/v1/broadcasts", json=body, headers=_key("k"))
        assert again.status_code == 202, again.text
        assert again.json() == first.json()
        other = await api.post("/v1/broadcasts", json={**body, "payload": {}}, headers=_key("k"))
        assert other.status_code == 409, other.text
        await real_redis.delete(keys.command_idempotency("k", 1))
        lost = await api.post("/v1/broadcasts", json=body, headers=_key("k"))
        assert lost.status_code == 503, lost.text
        assert await real_redis.xrange(keys.broadcast) == told  # nothing sent again
