"""The key layout (README "Keys"): literal hash tags, parsed back, one slot where it matters."""

from __future__ import annotations

import binascii

import pytest

from protocols.ids import new_id, new_id_in
from protocols.keys import Keys, group_partition, hub_group, partition_of

K = Keys("cb:")


def slot(key: str) -> int:
    """Redis Cluster's slot of `key` (CRC16/XMODEM of the hash tag, when there is one)."""
    start = key.find("{")
    if start != -1:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key.encode(), 0) % 16384


def test_the_layout_is_spelled_as_designed() -> None:
    assert K.out("specialist-build") == "cb:out:{specialist-build}"
    assert K.inbox("specialist-build") == "cb:in:{specialist-build}"
    assert K.done("specialist-build", "r1:C:1:x") == "cb:done:{specialist-build}:r1:C:1:x"
    assert (K.broadcast, K.dead, K.audit) == ("cb:broadcast", "cb:dead", "cb:audit")
    assert K.leader() == "cb:hub:{p0}:leader"
    assert K.fence(3) == "cb:hub:{p3}:fence"
    assert K.commands() == "cb:hub:{p0}:commands"
    assert K.commit("c1") == "cb:hub:{p0}:commit:c1"
    assert K.active_runs() == "cb:hub:{p0}:active"
    assert K.served("c1", 2) == "cb:hub:{p2}:served:c1"  # the slot of partition 2's commands
    assert K.run("R1") == "cb:run:{R1}"
    assert K.run_events("R1") == "cb:run:{R1}:events"
    assert K.run_context("R1") == "cb:run:{R1}:context"
    assert K.cuelist("deploy") == "cb:cuelist:{deploy}"
    assert K.cuelist_versions("deploy") == "cb:cuelist:{deploy}:versions"
    assert K.reply("c1") == "cb:hub:reply:c1"
    assert K.answers("a1") == "cb:hub:answers:a1"
    assert K.out_pattern == "cb:out:{*}"


def test_keys_touched_together_share_a_slot() -> None:
    agent = "specialist-build"
    assert slot(K.out(agent)) == slot(K.inbox(agent)) == slot(K.done(agent, "t"))
    assert slot(K.run("R1")) == slot(K.run_events("R1")) == slot(K.run_context("R1"))
    assert slot(K.leader()) == slot(K.fence()) == slot(K.commit("c")) == slot(K.active_runs())
    assert slot(K.cuelist("deploy")) == slot(K.cuelist_versions("deploy"))


@pytest.mark.parametrize("agent", ["a", "specialist-build", "x.y_z-9"])
def test_agent_of_a_stream(agent: str) -> None:
    assert K.agent_of_out(K.out(agent)) == agent
    assert K.agent_of_inbox(K.inbox(agent)) == agent
    assert K.agent_of_out(K.inbox(agent)) is None
    assert K.agent_of_inbox(K.out(agent)) is None


@pytest.mark.parametrize(
    "key",
    ["cb:out:agent", "cb:out:{}", "cb:out:{a}b}", "cb:out:{A}", "cb:out:{a:b}", "xx:out:{a}",
     "cb:out:{a", "cb:out:a}"],
)  # fmt: skip
def test_agent_of_out_refuses_what_is_not_an_out_stream(key: str) -> None:
    assert K.agent_of_out(key) is None


def test_key_slot_is_redis_clusters() -> None:
    from protocols.keys import key_slot

    assert key_slot("123456789") == 12739  # CRC16/XMODEM check value 0x31C3
    assert key_slot("foo") == 12182  # CLUSTER KEYSLOT foo
    for key in ["cb:run:{r1}:events", "{}x", "x{}{y}", "{a", "}a{b}", "cb:runs:all", "é{ü}"]:
        assert key_slot(key) == slot(key), key
    assert key_slot(K.run("r1")) == key_slot(K.run_events("r1")) == key_slot(K.run_context("r1"))


def test_slot_tagged_keys_land_in_their_slot() -> None:
    from protocols.keys import SLOTS, key_slot, slot_tag

    assert all(slot(slot_tag(s)) == s for s in range(SLOTS))
    for s in (0, 1, 8000, SLOTS - 1):
        assert key_slot(K.slot_fence(s)) == key_slot(K.applied(s, "c1")) == s
    assert K.journal() == "cb:hub:{p0}:journal"
    assert slot(K.journal()) == slot(K.leader())  # journaled under the lease's slot


def test_a_run_lives_in_the_partition_its_id_picks_and_groups_name_theirs() -> None:
    assert all(partition_of(new_id(), 1) == 0 for _ in range(20))
    ids = [new_id_in(p, 4) for p in range(4) for _ in range(5)]
    assert [partition_of(i, 4) for i in ids] == [p for p in range(4) for _ in range(5)]
    assert partition_of(ids[7], 4) == partition_of(ids[7], 4)  # stable
    assert [hub_group(p) for p in range(3)] == ["hub", "hub-p1", "hub-p2"]
    assert [group_partition(hub_group(p)) for p in range(12)] == list(range(12))
    for other in ("hubx", "hub-p", "hub-p01", "hub-px", "specialist-build", "hub-p-1"):
        assert group_partition(other) is None
    assert K.resources() == "cb:resources" and K.resources(2) == "cb:hub:{p2}:resources"
