"""A step's operations packed for the cluster's journal and back, and grouped by slot."""

from __future__ import annotations

import pytest

from hub.store.ops import by_slot, pack, unpack
from protocols.keys import Keys, key_slot


def test_pack_round_trips_any_bytes() -> None:
    ops = [
        ["HSET", "cb:run:{r1}", "h", '{"a": 1}', "c:X", b"\x00\xff\n12\n"],
        ["XADD", "cb:in:{a}", "*", "m", b""],
        ["ZADD", "cb:runs:all", "NX", 12.5, "r1"],
        ["PEXPIRE", "cb:run:{r1}", 3600000],
    ]
    back = unpack(pack(ops))
    assert back == [
        ["HSET", "cb:run:{r1}", b"h", b'{"a": 1}', b"c:X", b"\x00\xff\n12\n"],
        ["XADD", "cb:in:{a}", b"*", b"m", b""],
        ["ZADD", "cb:runs:all", b"NX", b"12.5", b"r1"],
        ["PEXPIRE", "cb:run:{r1}", b"3600000"],
    ]
    assert unpack(pack([])) == []


def test_ops_group_by_slot_in_order() -> None:
    keys = Keys("cb:")
    ops = [
        ["HSET", keys.run("r1"), "h", "1"],
        ["XADD", keys.inbox("a"), "*", "m", "go"],
        ["XADD", keys.run_events("r1"), "*", "e", "x"],
        ["HSET", keys.run("r1"), "h", "2"],
    ]
    groups = by_slot(ops)
    assert groups[key_slot(keys.run("r1"))] == [ops[0], ops[2], ops[3]]
    assert groups[key_slot(keys.inbox("a"))] == [ops[1]]


def test_an_op_the_scripts_cannot_run_is_refused_before_it_is_journaled() -> None:
    with pytest.raises(ValueError, match="MSET is not a one-key command"):
        pack([["MSET", "a", "1", "b", "2"]])
