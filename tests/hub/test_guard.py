"""What a specialist's message may touch (hub.engine.guard), on the pure engine: its own runs
and cues only, its own context entries, capped escalations, slots it cannot multiply, and
run records that stay small whatever it sends."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fakeredis import FakeAsyncRedis as FakeRedis

from hub.engine import guard, inputs
from hub.engine.state import RECORD_LIST_MAX, RunRecord
from hub.store.commit import FencedCommit
from hub.store.layout import HEADER, run_fields
from protocols import payloads as p
from protocols.codec import make
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus, Severity
from protocols.transport import Storage
from tests.hub.sim import Sim, plan_of

SHARED = """
cuelist: shared
cues:
  - {id: BUILD, target_agents: [builder], auto_follow: SHIP}
  - {id: SHIP, target_agents: [shipper], ack_timeout_s: 5}
"""
OTHER = """
cuelist: other
cues:
  - {id: X, target_agents: [honest]}
"""


def _context(sim: Sim, agent: str, key: str, value: object, run: str = "r1",
             cue: str | None = "BUILD") -> None:  # fmt: skip
    sim.send(agent, T.TASK_CONTEXT, p.TaskContext(key=key, value=value), run, cue)


def _escs(sim: Sim) -> list[tuple[str, str | None, str | None, int]]:
    found = sim.engine.escalations.by_id.values()
    return sorted((e.cause, e.run_id, e.cue_id, e.count) for e in found)


def _header_bytes(sim: Sim, run_id: str = "r1") -> int:
    op = run_fields("k", sim.run(run_id), [])[0]
    return len(op[op.index(HEADER) + 1])


def test_context_only_from_a_target_of_the_cue_and_never_over_another_agents() -> None:
    sim = Sim(plan_of(SHARED), plan_of(OTHER))
    sim.start()
    sim.start("r2", plan_of(OTHER))
    _context(sim, "builder", "artifact", "app.tar")
    _context(sim, "builder", "artifact", "app-v2.tar")  # its own entry: it may rewrite it
    _context(sim, "shipper", "artifact", "evil.tar", cue="SHIP")  # another agent's entry
    _context(sim, "shipper", "artifact", "evil.tar", cue="BUILD")  # a cue not its own
    _context(sim, "shipper", "note", "hello", run="r2", cue="X")  # a run not its own
    _context(sim, "builder", "orphan", 1, cue=None)  # no cue: no target to be
    writes = [(o.context, o.owners) for o in sim.outs if o.context]
    assert [[(r, k, e["value"], e["source"]) for r, k, e in c] for c, _ in writes] == [
        [("r1", "artifact", "app.tar", "builder")],
        [("r1", "artifact", "app-v2.tar", "builder")],
    ]
    assert sim.run().context_owners == {"artifact": "builder"}
    assert _escs(sim) == [
        ("context_owned:shipper", "r1", "SHIP", 1),
        ("not_a_target:shipper", "r1", "BUILD", 1),
        ("not_in_run:shipper", None, None, 1),
        ("unknown_cue:builder", "r1", None, 1),
    ]
    (owned,) = [e for e in sim.engine.escalations.by_id.values() if "owned" in e.cause]
    assert "written by builder" in owned.detail  # the refusal names the owner
    assert sim.run("r2").record.protocol_violations == 0  # r2 never saw shipper's write
    sim.restart()  # ownership is stored with the run, not only in memory
    assert sim.run().context_owners == {"artifact": "builder"}
    _context(sim, "shipper", "artifact", "evil.tar", cue="SHIP")
    assert _escs(sim)[0] == ("context_owned:shipper", "r1", "SHIP", 1)  # a new engine's slot


def test_a_runs_context_holds_a_bounded_number_of_keys() -> None:
    sim = Sim(plan_of(SHARED))
    sim.start()
    for i in range(guard.CONTEXT_KEYS_MAX + 10):
        _context(sim, "builder", f"k{i}", i)
    assert len(sim.run().context_owners) == guard.CONTEXT_KEYS_MAX
    (full,) = [e for e in sim.engine.escalations.by_id.values() if "full" in e.cause]
    assert full.count == 10


def test_a_context_write_sent_at_year_one_without_an_offset_is_read_as_utc() -> None:
    """A target's `sent_at` of 0001-01-01T00:00:00 (no offset) once made the step raise
    (a naive datetime's timestamp() is local time: year 0 is out of range), which ends
    the leader's term, and the next term handled the same write again."""
    sim = Sim(plan_of(SHARED))
    sim.start()
    naive = datetime(1, 1, 1)
    msg = make(T.TASK_CONTEXT, p.TaskContext(key="k", value=1), from_agent="builder",
               run_id="r1", cue_id="BUILD", sent_at=naive)  # fmt: skip
    inputs.handle(sim.engine, msg)
    sim._drain()
    (written,) = [entry for o in sim.outs for _, key, entry in o.context if key == "k"]
    assert written["timestamp"] == naive.replace(tzinfo=UTC).timestamp()


def test_100000_made_up_run_ids_make_one_escalation() -> None:
    sim = Sim(plan_of(SHARED))
    sim.start()
    for i in range(100_000):
        msg = make(T.STATUS_COMPLETED, p.StatusCompleted(), from_agent="mallory",
                   run_id=f"fake-{i}", cue_id=f"C{i}")  # fmt: skip
        inputs.handle(sim.engine, msg)
    out = sim.engine.take()
    assert _escs(sim) == [("unknown_run:mallory", None, None, 100_000)]
    assert len(out.escalations) == 1 and not out.events  # one record written, no events
    assert sim.run().record.protocol_violations == 0


def test_20000_stray_completions_leave_the_run_header_small() -> None:
    sim = Sim(plan_of(SHARED))
    sim.start()
    before = _header_bytes(sim)
    stray = [
        ("builder", "BUILD", 1),  # its own cue, but it is in WARNING: out of order
        ("builder", "NOPE", 1),  # no such cue
        ("shipper", "BUILD", 1),  # a cue of its run that is not its own
        ("builder", "BUILD", 7),  # another attempt: late, ignored
    ]
    for i in range(20_000):
        agent, cue, attempt = stray[i % len(stray)]
        msg = make(T.STATUS_COMPLETED, p.StatusCompleted(attempt=attempt, result={"i": i}),
                   from_agent=agent, run_id="r1", cue_id=cue)  # fmt: skip
        inputs.handle(sim.engine, msg)
    sim._drain()
    record = sim.run().record
    assert len(record.errors) == RECORD_LIST_MAX
    assert record.totals["errors"] == record.protocol_violations == 15_000
    assert _header_bytes(sim) < before + 3_000, _header_bytes(sim)  # not 600 KiB
    assert len([e for _, e in sim.outs[-1].events if e["type"].startswith("escalation")]) == 3
    assert sim.cue("BUILD").state is CueState.WARNING


def test_specialist_escalations_only_about_its_own_runs_and_cues() -> None:
    sim = Sim(plan_of(SHARED), plan_of(OTHER))
    sim.start()
    sim.start("r2", plan_of(OTHER))

    def escalate(agent: str, run: str | None, cue: str | None, cause: str) -> None:
        body = p.EscalationError(severity=Severity.CRITICAL, cause=cause, detail="!")
        msg = make(T.ESCALATION_ERROR, body, from_agent=agent, run_id=run, cue_id=cue)
        guard.specialist_escalation(sim.engine, msg, Severity.HIGH)
        sim._drain()

    for n in range(50):  # free text in cause and ids: never a new slot
        escalate("shipper", "r2", "X", f"a{n}")  # a run it has no part in
        escalate("shipper", "r1", "BUILD", f"b{n}")  # a cue of its run, not its own
        escalate("shipper", None, None, f"c{n}")  # no run at all
        escalate("shipper", f"made-up-{n}", None, f"d{n}")
        escalate("shipper", "r1", "SHIP", f"e{n}")  # its own cue: recorded, capped
    assert _escs(sim) == [
        ("escalation.error:shipper", "r1", "SHIP", 50),
        ("escalation_without_run:shipper", None, None, 50),
        ("not_a_target:shipper", "r1", "BUILD", 50),
        ("not_in_run:shipper", None, None, 50),
        ("unknown_run:shipper", None, None, 50),
    ]
    own = next(e for e in sim.engine.escalations.by_id.values() if e.type is T.ESCALATION_ERROR)
    assert (own.raised_by, own.severity) == ("shipper", Severity.HIGH)
    violations = [e for e in sim.engine.escalations.by_id.values() if e is not own]
    assert {e.raised_by for e in violations} == {"hub"}
    assert {e.payload["sender"] for e in violations} == {"shipper"}  # caused by, named
    assert sim.engine.paused is None
    untouched = sim.run("r2").record
    assert (untouched.protocol_violations, untouched.errors, untouched.escalations) == (0, [], [])
    assert sim.run("r2").status is RunStatus.RUNNING


def test_a_dead_lettered_reply_is_linked_to_its_cue() -> None:
    sim = Sim(plan_of(SHARED))
    sim.start()
    sim.call_through("BUILD", ["builder"])
    assert sim.cue("SHIP").state is CueState.WARNING
    guard.refused_entry(
        sim.engine, kind=guard.BAD_MESSAGE, sender="shipper",
        detail="shipper: bad field payload.attempt", stream="out", entry_id="5-0",
        letter_id="9-0", run_id="r1", cue_id="SHIP",
    )  # fmt: skip
    sim._drain()
    reason = sim.cue("SHIP").reason or ""
    assert "; a reply from shipper was dead-lettered (dead letter 9-0): shipper: bad" in reason
    events = [e for o in sim.outs for _, e in o.events if e["type"] == "dead_letter"]
    assert [(e["cue"], e["agent"], e["dead_letter"]) for e in events] == [
        ("SHIP", "shipper", "9-0")
    ]
    sim.advance(5.01)
    assert sim.cue("SHIP").state is CueState.FAILED
    assert "shipper's reply was dead-lettered (dead letter 9-0)" in (sim.cue("SHIP").error or "")
    (esc,) = [e for e in sim.engine.escalations.by_id.values() if "bad_message" in e.cause]
    assert (esc.run_id, esc.cue_id) == ("r1", "SHIP")


def test_a_refused_entry_naming_a_cue_not_its_own_links_nothing() -> None:
    sim = Sim(plan_of(SHARED))
    sim.start()
    for run_id, cue_id in [("r1", "BUILD"), ("r1", "NOPE"), ("gone", "SHIP"), (None, None)]:
        guard.refused_entry(
            sim.engine, kind=guard.BAD_MESSAGE, sender="shipper", detail="junk", stream="out",
            entry_id="5-0", letter_id="9-0", run_id=run_id, cue_id=cue_id,
        )  # fmt: skip
    sim._drain()
    assert sim.cue("BUILD").reason == "waiting for ack.warning from builder"
    assert _escs(sim) == [("bad_message:shipper", None, None, 4)]
    assert sim.run().record.protocol_violations == 0


def test_record_lists_keep_the_first_items_and_count_all() -> None:
    record = RunRecord()
    for i in range(50):
        record.note("waits", f"w{i}")
    assert record.waits == [f"w{i}" for i in range(RECORD_LIST_MAX)]
    assert record.totals == {"waits": 50}
    assert json.loads(record.model_dump_json())["totals"] == {"waits": 50}


def test_what_a_target_sends_is_stored_as_json_whatever_its_numbers() -> None:
    """A specialist's JSON may hold NaN and infinities (the decoder takes them, as Python's
    json does). The run's record writes them as null; its events and context wrote them as
    `NaN`, which is not JSON: any reader but Python's choked on the run's history. Every
    stored value is JSON now, its odd numbers null as in the record."""
    sim = Sim(plan_of(SHARED))
    sim.start()
    sim.ack_warning("builder", "BUILD")
    sim.ack_standby("builder", "BUILD")
    odd = [float("nan"), float("inf"), -float("inf"), 10**30]
    for message_type, payload in (
        (T.TASK_CONTEXT, p.TaskContext(key="k", value=odd)),
        (T.STATUS_COMPLETED, p.StatusCompleted(result={"scores": odd})),
    ):
        inputs.handle(sim.engine, make(message_type, payload, from_agent="builder",
                                       run_id="r1", cue_id="BUILD"))  # fmt: skip
    out = sim.engine.take()  # (not the Sim's drain: NaN read back is not NaN)
    keys = Keys("sim:")
    ops = FencedCommit(Storage(FakeRedis()), keys).ops(out, sim.engine)
    run_keys = (keys.run_events("r1"), keys.run_context("r1"))
    # the context's HSETs (one entry each) and the events' XADDS (every word after the field)
    stored = [
        word for op in ops if op[1] in run_keys
        for word in (op[4:] if op[0] == "XADDS" else op[-1:] if op[0] == "HSET" else ())
    ]  # fmt: skip

    def strict(text: str | bytes) -> Any:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    values = [strict(s) for s in stored]
    assert {"value": [None, None, None, 10**30]}.items() <= next(
        v for v in values if "value" in v
    ).items()
    assert [None, None, None, 10**30] in [
        r.get("scores") for v in values for r in (v.get("result") or {}).values()
    ]


RETRIED = """
cuelist: retried
cues:
  - {id: A, target_agents: [ann], coordination: direct, retries: 1}
"""


def test_only_a_targets_rejection_of_the_call_its_cue_is_in_fails_the_attempt() -> None:
    sim = Sim(plan_of(RETRIED))
    sim.start()
    sim.fail("ann", "A")  # attempt 2 is assigned
    assert sim.cue("A").attempt == 2 and sim.cue("A").state is CueState.GO

    def reject(sender: str, kind: str, attempt: int) -> None:
        guard.rejected_call(
            sim.engine, sender=sender, message_type=kind, run_id="r1", cue_id="A",
            attempt=attempt, reason="undecodable", letter_id="1-0",
        )  # fmt: skip
        sim._drain()

    reject("ann", "task.assign", 1)  # an earlier attempt's
    reject("zed", "task.assign", 2)  # not its target
    reject("ann", "coord.warning", 2)  # not the call it is in
    reject("ann", "status.completed", 2)  # not a call at all
    assert sim.cue("A").state is CueState.GO and sim.cue("A").attempt == 2
    reject("ann", "task.assign", 2)
    assert sim.cue("A").state is CueState.FAILED  # no retry left
    assert sim.cue("A").error == "ann rejected its task.assign (dead letter 1-0): undecodable"


def test_a_specialists_escalation_is_kept_and_announced_in_a_few_kilobytes() -> None:
    """An escalation's detail was stored whole twice (as its detail and in its payload),
    with every list and string its sender chose, and a high one's detail went whole to
    every replica of every agent in a broadcast.notice: 200 KiB a slot, kept for ever."""
    sim = Sim(plan_of(SHARED))
    sim.start()
    sim.call_through("BUILD", ["builder"])
    body = p.EscalationConflict(
        severity=Severity.HIGH, cause="c" * 50_000, detail="d" * 200_000,
        agents_involved=["a" * 1_000] * 5_000, resource_in_question="r" * 10_000,
        proposed_resolution="p" * 10_000,
    )  # fmt: skip
    msg = make(T.ESCALATION_CONFLICT, body, from_agent="shipper", run_id="r1", cue_id="SHIP")
    guard.specialist_escalation(sim.engine, msg, Severity.HIGH)
    sim._drain()
    (esc,) = [e for e in sim.engine.escalations.by_id.values() if e.raised_by == "shipper"]
    assert len(esc.model_dump_json()) < 20_000, len(esc.model_dump_json())  # was 5.4 MB
    assert esc.detail.startswith("d" * 400) and esc.payload["detail"] == esc.detail
    notices = [m for o in sim.outs for _, m in o.messages if m.message_type is T.BROADCAST_NOTICE]
    assert len(notices) == 1 and len(notices[0].body(p.BroadcastNotice).text) < 1_000
