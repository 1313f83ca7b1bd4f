"""Every transition of the cue state machine, on the pure engine with a fake clock."""

from __future__ import annotations

import pytest

from hub.api.views import cue_public
from hub.engine import inputs
from hub.engine.base import CHUNK
from protocols import payloads as p
from protocols.codec import make
from protocols.errors import Conflict
from protocols.messages import MessageType as T
from protocols.states import CueState, FiredBy, RunStatus, TargetState
from tests.hub.sim import Sim, plan_of

CHAIN = """
cuelist: chain
cues:
  - {id: C1, target_agents: [a, b], auto_follow: C2}
  - {id: C2, target_agents: [a], auto_follow: C3}
  - {id: C3, target_agents: [b]}
"""


def test_three_phase_call_and_auto_follow_chain() -> None:
    sim = Sim(plan_of(CHAIN))
    sim.start()
    warnings = sim.take_sent(T.COORD_WARNING)
    assert sorted(a for a, _ in warnings) == ["a", "b"]
    assert sim.cue("C1").state is CueState.WARNING
    assert sim.cue("C1").fired_by is FiredBy.RUN_START
    assert sim.cue("C2").state is CueState.WAITING
    sim.ack_warning("a", "C1")
    assert sim.cue("C1").state is CueState.WARNING
    assert "b" in (sim.cue("C1").reason or "")  # who the ack is missing from
    sim.ack_warning("b", "C1")
    assert sim.cue("C1").state is CueState.STANDBY
    assert len(sim.take_sent(T.COORD_STANDBY)) == 2
    sim.ack_standby("a", "C1")
    assert not sim.take_sent(T.COORD_GO)
    sim.ack_standby("b", "C1")
    gos = sim.take_sent(T.COORD_GO)
    assert sorted(a for a, _ in gos) == ["a", "b"]  # every target, in one outbox
    assert sim.cue("C1").gos == [{"attempt": 1, "fired_by": "run-start", "at": sim.now}]
    # early warning: C2's only predecessor has been GO'd
    assert sim.cue("C2").state is CueState.WARNING and sim.cue("C2").early
    sim.complete("a", "C1")
    sim.complete("b", "C1")
    assert sim.cue("C1").state is CueState.COMPLETED
    sim.ack_warning("a", "C2")
    assert sim.cue("C2").state is CueState.STANDBY
    assert sim.cue("C2").fired_by is FiredBy.AUTO_FOLLOW
    sim.ack_standby("a", "C2")
    sim.complete("a", "C2")
    sim.call_through("C3", ["b"])
    assert sim.run().status is RunStatus.SUCCESS
    assert sim.run().fired() == ["C1", "C2", "C3"]


def test_early_warned_cue_waits_for_predecessor_before_standby() -> None:
    sim = Sim(plan_of(CHAIN))
    sim.start()
    sim.call_through("C1", ["a", "b"][:0])  # nothing: just keep the helpers honest
    for a in ("a", "b"):
        sim.ack_warning(a, "C1")
    for a in ("a", "b"):
        sim.ack_standby(a, "C1")
    sim.ack_warning("a", "C2")  # prepared while C1 runs
    assert sim.cue("C2").state is CueState.WARNING
    assert "predecessor" in (sim.cue("C2").reason or "")
    assert not sim.take_sent(T.COORD_STANDBY)[2:]
    sim.complete("a", "C1")
    sim.complete("b", "C1")
    assert sim.cue("C2").state is CueState.STANDBY


def test_predecessor_failure_stands_down_early_warned_cue_and_blocks_chain() -> None:
    sim = Sim(plan_of(CHAIN))
    sim.start()
    for a in ("a", "b"):
        sim.ack_warning(a, "C1")
    for a in ("a", "b"):
        sim.ack_standby(a, "C1")
    sim.take_sent()
    sim.fail("a", "C1", error="compiler exploded")
    standdowns = sim.take_sent(T.COORD_STANDDOWN)
    assert [a for a, m in standdowns if m.cue_id == "C2"] == ["a"]
    assert sim.cue("C1").state is CueState.FAILED
    assert sim.cue("C2").state is CueState.BLOCKED
    assert sim.cue("C3").state is CueState.BLOCKED
    assert "C1" in (sim.cue("C3").reason or "")  # the root cause, transitively
    assert sim.run().status is RunStatus.FAILED


DAG = """
cuelist: dag
cues:
  - {id: BUILD, target_agents: [a]}
  - {id: TEST, target_agents: [b], depends_on: [BUILD], raises: [tests_passed]}
  - {id: DOCS, target_agents: [a], depends_on: [BUILD], on_failure: continue}
  - id: DEPLOY
    target_agents: [c]
    depends_on: [TEST, DOCS]
    conditions: [tests_passed, approval_received]
"""


def test_dependencies_conditions_and_fail_forward() -> None:
    sim = Sim(plan_of(DAG))
    sim.start()
    assert sim.cue("DEPLOY").state is CueState.WAITING
    sim.call_through("BUILD", ["a"])
    assert sim.cue("TEST").fired_by is FiredBy.DEPENDENCIES
    sim.call_through("TEST", ["b"])
    assert "tests_passed" in sim.run().conditions
    sim.ack_warning("a", "DOCS")
    sim.ack_standby("a", "DOCS")
    sim.fail("a", "DOCS")
    assert sim.cue("DOCS").state is CueState.FAILED  # on_failure: continue
    dep = sim.cue("DEPLOY")
    assert dep.state is CueState.WAITING
    assert dep.reason == "waiting for conditions approval_received"
    sim.engine.raise_condition("r1", "approval_received")
    sim._drain()
    assert sim.cue("DEPLOY").state is CueState.WARNING
    sim.call_through("DEPLOY", ["c"])
    assert sim.run().status is RunStatus.PARTIAL


MANUAL = """
cuelist: manual
cues:
  - {id: A, target_agents: [a]}
  - {id: B, target_agents: [a], depends_on: [A], manual: true}
"""


def test_manual_cue_is_armed_and_operator_go_fires_it() -> None:
    sim = Sim(plan_of(MANUAL))
    sim.start()
    with pytest.raises(Conflict, match="not armed"):
        sim.engine.operator_go("r1", "B")
    sim.call_through("A", ["a"])
    assert sim.cue("B").state is CueState.ARMED
    sim.engine.operator_go("r1", "B")
    sim._drain()
    assert sim.cue("B").state is CueState.WARNING
    assert sim.cue("B").fired_by is FiredBy.OPERATOR
    with pytest.raises(Conflict):
        sim.engine.operator_go("r1", "B")  # a second GO does nothing but refuse
    sim.call_through("B", ["a"])
    assert sim.run().status is RunStatus.SUCCESS


def test_go_refusal_names_the_state_and_a_reason_only_when_there_is_one() -> None:
    then_c = "manual: true}\n  - {id: C, target_agents: [a], depends_on: [B], manual: true}"
    sim = Sim(plan_of(MANUAL.replace("manual: true}", then_c)))
    sim.start()
    with pytest.raises(Conflict) as waiting:
        sim.engine.operator_go("r1", "B")
    reason = sim.cue("B").reason
    assert reason and str(waiting.value) == f"cue B is not armed: it is waiting: {reason}"
    sim.call_through("A", ["a"])
    sim.engine.operator_go("r1", "B")
    sim._drain()
    sim.call_through("B", ["a"])
    assert sim.cue("B").state is CueState.COMPLETED and not sim.cue("B").reason
    with pytest.raises(Conflict) as done:
        sim.engine.operator_go("r1", "B")
    assert str(done.value) == "cue B is not armed: it is completed"  # no dangling ": "


RETRY = """
cuelist: retry
defaults: {retries: 1, ack_timeout_s: 5}
cues:
  - {id: A, target_agents: [a, b]}
"""


def test_ack_timeout_escalates_then_retries_then_fails() -> None:
    sim = Sim(plan_of(RETRY))
    sim.start()
    sim.ack_warning("a", "A")
    sim.advance(5.01)
    cue = sim.cue("A")
    assert cue.attempt == 2 and cue.state is CueState.WARNING  # retried: three phases again
    escs = list(sim.engine.escalations.by_id.values())
    assert [e.type for e in escs] == [T.ESCALATION_TIMEOUT]
    assert escs[0].payload["waiting_for"] == ["b"]
    sim.advance(5.01)
    assert sim.cue("A").state is CueState.FAILED
    assert escs[0].count == 2  # deduplicated: the first claims the slot, the rest count
    assert sim.run().status is RunStatus.FAILED


def test_late_and_duplicate_acks_change_nothing() -> None:
    sim = Sim(plan_of(RETRY))
    sim.start()
    sim.ack_warning("a", "A")
    sim.advance(5.01)  # attempt 1 timed out
    sim.ack_warning("b", "A", attempt=1)  # late ack of the old attempt
    assert sim.cue("A").targets == {"a": TargetState.WARNED, "b": TargetState.WARNED}
    sim.ack_warning("a", "A", attempt=2)
    sim.ack_warning("a", "A", attempt=2)
    sim.ack_warning("b", "A", attempt=2)
    sim.ack_standby("a", "A", attempt=2)
    sim.ack_standby("b", "A", attempt=2)
    sim.ack_standby("b", "A", attempt=2)
    assert len(sim.take_sent(T.COORD_GO)) == 2  # one GO per target for attempt 2
    assert len(sim.cue("A").gos) == 1


def test_not_ready_standby_waits_with_reason() -> None:
    sim = Sim(plan_of(RETRY))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_warning("b", "A")
    sim.ack_standby("a", "A", ready=False, reason="disk full")
    assert sim.cue("A").reason == "a not ready: disk full"
    sim.ack_standby("b", "A")
    sim.ack_standby("a", "A")
    assert sim.cue("A").state is CueState.GO


def test_protocol_checks_are_recorded_and_escalated_once() -> None:
    sim = Sim(plan_of(RETRY))
    sim.start()
    sim.ack_standby("a", "A")  # out of order: still in WARNING
    sim.ack_standby("a", "A")
    sim.ack_warning("mallory", "A")  # not a target
    sim.send("a", T.ACK_WARNING, p.AckWarning(), run_id="nope", cue_id="A")  # unknown run
    record = sim.run().record
    assert record.protocol_violations == 2  # mallory has no part in the run: not touched
    escs = sorted(sim.engine.escalations.by_id.values(), key=lambda e: e.cause)
    # one slot per (kind, sender, and the run and cue only when real and its sender's)
    assert [(e.cause, e.run_id, e.cue_id, e.count) for e in escs] == [
        ("not_in_run:mallory", None, None, 1),
        ("out_of_order:a", "r1", "A", 2),
        ("unknown_run:a", None, None, 1),
    ]
    assert sim.cue("A").state is CueState.WARNING


def test_cancel_stands_down_everything() -> None:
    sim = Sim(plan_of(CHAIN))
    sim.start()
    sim.take_sent()
    sim.engine.cancel("r1")
    sim._drain()
    assert {c.state for c in sim.run().cues.values()} == {CueState.CANCELLED}
    assert len(sim.take_sent(T.COORD_STANDDOWN)) == 2
    assert sim.run().status is RunStatus.CANCELLED
    with pytest.raises(Conflict):
        sim.engine.cancel("r1")


DIRECT = """
cuelist: direct
cues:
  - {id: A, target_agents: [a], coordination: direct, auto_follow: B}
  - {id: B, target_agents: [a], coordination: direct}
"""


def test_direct_cues_skip_the_barrier() -> None:
    sim = Sim(plan_of(DIRECT))
    sim.start()
    assigns = sim.take_sent(T.TASK_ASSIGN)
    assert [m.cue_id for _, m in assigns] == ["A"]
    assert not sim.take_sent(T.COORD_WARNING)
    sim.complete("a", "A")
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["B"]
    sim.complete("a", "B")
    assert sim.run().status is RunStatus.SUCCESS


HANDOFF = """
cuelist: handoff
specialists:
  coder: {provides: [implemented_code], handoff_to: [tester]}
  tester: {requires: [implemented_code, test_plan]}
cues:
  - id: CODE
    target_agents: [coder]
    handoff: {to: tester, context: [test_plan]}
    auto_follow: TEST
  - {id: TEST, target_agents: [tester]}
"""


def _handoff(sim: Sim, **ctx: object) -> None:
    body = p.TaskHandoff(
        from_agent="coder", to_agent="tester", task_id="CODE",
        handoff_context=p.HandoffContext(**ctx),  # type: ignore[arg-type]
    )  # fmt: skip
    sim.send("coder", T.TASK_HANDOFF, body, cue_id="CODE")


def test_valid_handoff_is_forwarded_and_its_context_reaches_the_next_cue() -> None:
    sim = Sim(plan_of(HANDOFF))
    sim.start()
    sim.ack_warning("coder", "CODE")
    sim.ack_standby("coder", "CODE")
    _handoff(sim, implemented_code="src/x.py", test_plan="unit")  # sent before completing
    assert [a for a, _ in sim.take_sent(T.TASK_HANDOFF)] == ["tester"]
    assert sim.cue("CODE").state is CueState.GO  # completes only once its target has
    sim.complete("coder", "CODE")
    assert sim.cue("CODE").state is CueState.COMPLETED
    sim.ack_warning("tester", "TEST")
    sim.ack_standby("tester", "TEST")
    ((_, go),) = sim.take_sent(T.COORD_GO)[-1:]
    assert go.payload.context["test_plan"] == "unit"  # type: ignore[attr-defined]


def test_invalid_handoff_is_refused_naming_missing_keys_and_fails_the_cue() -> None:
    sim = Sim(plan_of(HANDOFF))
    sim.start()
    sim.ack_warning("coder", "CODE")
    sim.ack_standby("coder", "CODE")
    _handoff(sim, work_completed=["x"])  # neither key the tester requires
    assert not sim.take_sent(T.TASK_HANDOFF)
    (esc,) = sim.engine.escalations.by_id.values()
    assert esc.type is T.ESCALATION_HANDOFF_REJECTED
    assert esc.payload["missing"] == ["implemented_code", "test_plan"]
    assert sim.cue("CODE").state is CueState.FAILED
    assert sim.cue("TEST").state is CueState.BLOCKED


def test_a_handoff_lacking_a_key_its_senders_contract_provides_is_rejected() -> None:
    """The coder's contract `provides: [implemented_code]` (the load-time promise, which
    is why the cuelist validated); its handoff's actual context lacks it: the promise was
    not kept, and the run-time check of the actual context catches it."""
    sim = Sim(plan_of(HANDOFF.replace("  - {id: TEST,", "  - {id: TEST, retries: 2,")))
    sim.start()
    sim.ack_warning("coder", "CODE")
    sim.ack_standby("coder", "CODE")
    _handoff(sim, test_plan="unit")
    assert not sim.take_sent(T.TASK_HANDOFF)  # never forwarded to the tester
    (esc,) = sim.engine.escalations.by_id.values()
    assert esc.type is T.ESCALATION_HANDOFF_REJECTED
    assert esc.payload["missing"] == ["implemented_code"]
    assert "implemented_code" in esc.detail
    code = sim.cue("CODE")
    assert code.state is CueState.FAILED and code.attempt == 1  # failed, not retried
    assert "implemented_code" in (code.reason or "")
    assert sim.cue("TEST").state is CueState.BLOCKED
    assert sim.run().status is RunStatus.FAILED


def test_a_declared_handoff_that_never_comes_fails_the_cue_at_once() -> None:
    retried = HANDOFF.replace("handoff: {to: tester", "retries: 3\n    handoff: {to: tester")
    sim = Sim(plan_of(retried))
    sim.start()
    sim.ack_warning("coder", "CODE")
    sim.ack_standby("coder", "CODE")
    sim.complete("coder", "CODE")  # every target completed, and no handoff came
    code = sim.cue("CODE")  # now, not at go_timeout_s: the clock has not moved
    assert code.state is CueState.FAILED and code.attempt == 1
    why = "completed without the handoff to tester (requires implemented_code, test_plan)"
    assert code.error == why and code.reason == f"failed: {why}"
    told = [e for e in sim.events_of("cue") if e["cue"] == "CODE"]
    assert told[-1]["state"] == "failed" and told[-1]["reason"] == f"failed: {why}"
    assert sim.cue("TEST").state is CueState.BLOCKED
    assert sim.run().status is RunStatus.FAILED and sim.run().completed_at == sim.now


TWO_TARGETS = """
cuelist: two
cues:
  - {id: A, target_agents: [a, b]}
"""


def test_every_change_of_a_reason_is_an_event() -> None:
    """Sim checks after every step that the events told each cue's current reason; here
    the reasons of one call, as a watcher sees them."""
    sim = Sim(plan_of(TWO_TARGETS))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_warning("b", "A")
    sim.ack_standby("b", "A", ready=False, reason="disk full")
    sim.ack_standby("b", "A")
    told = [(e["type"], e["reason"]) for _, e in sim.events if e["type"] in ("cue", "reason")]
    assert told == [
        ("cue", "waiting for ack.warning from a, b"),
        ("reason", "waiting for ack.warning from b"),
        ("cue", "waiting for ack.standby from a, b"),
        ("reason", "b not ready: disk full"),
        ("reason", "waiting for ack.standby from a"),
    ]


def test_a_wide_cues_reason_names_the_first_few_it_waits_for_and_counts_the_rest() -> None:
    """A reason is written with each step of its cue and shown on the desk: one of a cue
    of twelve targets names eight (in sorted order) and counts the others."""
    agents = [f"agent-{i:02d}" for i in reversed(range(12))]
    sim = Sim(plan_of(f"cuelist: w\ncues:\n  - {{id: A, target_agents: [{', '.join(agents)}]}}\n"))
    sim.start()
    first = ", ".join(f"agent-{i:02d}" for i in range(8))
    assert sim.cue("A").reason == f"waiting for ack.warning from {first} and 4 more"
    for i in range(3):
        sim.ack_warning(f"agent-{i:02d}", "A")
    shown = ", ".join(f"agent-{i:02d}" for i in range(3, 11))
    assert sim.cue("A").reason == f"waiting for ack.warning from {shown} and 1 more"
    for i in range(3, 11):
        sim.ack_warning(f"agent-{i:02d}", "A")
    assert sim.cue("A").reason == "waiting for ack.warning from agent-11"  # none more


def test_a_wide_cues_timeout_names_the_first_few_it_waited_for_and_escalates_them_all() -> None:
    agents = [f"agent-{i:02d}" for i in range(12)]
    sim = Sim(plan_of(f"cuelist: w\ncues:\n  - {{id: A, target_agents: [{', '.join(agents)}]}}\n"))
    sim.start()
    sim.advance(5.01)  # ack_timeout_s
    first = ", ".join(agents[:8])
    assert sim.cue("A").error == f"timeout: no ack.warning from {first} and 4 more within 5s"
    (esc,) = sim.engine.escalations.by_id.values()
    assert esc.payload["waiting_for"] == agents  # every one, as a list


def test_a_cue_waiting_on_many_predecessors_names_the_first_few_in_order() -> None:
    cues = [
        f"  - {{id: P{i}, target_agents: [a], manual: true}}" for i in (3, 1, 2, 9, 8, 7, 6, 5, 4)
    ]
    preds = ", ".join(f"P{i}" for i in (3, 1, 2, 9, 8, 7, 6, 5, 4))
    cues.append(f"  - {{id: Z, target_agents: [a], depends_on: [{preds}]}}")
    sim = Sim(plan_of("cuelist: many\ncues:\n" + "\n".join(cues) + "\n"))
    sim.start()
    shown = ", ".join(f"P{i}" for i in (3, 1, 2, 9, 8, 7, 6, 5))
    assert sim.cue("Z").reason == f"waiting for predecessors {shown} and 1 more"


WIDE = """
cuelist: wide
start: [E1, E2, E3, E4, E5]
cues:
  - {id: E1, target_agents: [a], coordination: direct}
  - {id: E2, target_agents: [a], coordination: direct}
  - {id: E3, target_agents: [a], coordination: direct}
  - {id: E4, target_agents: [a], coordination: direct}
  - {id: E5, target_agents: [a], coordination: direct, auto_follow: F}
  - {id: F, target_agents: [a], coordination: direct}
"""


def test_a_big_run_starts_in_chunks_and_each_cue_fires_once() -> None:
    sim = Sim(plan_of(WIDE))
    sim.start(chunk=2)
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["E1", "E2"]
    queued = sim.cue("E3")
    assert queued.state is CueState.PENDING
    assert cue_public(queued).reason == "queued: the run is starting"  # as the API shows it
    sim.complete("a", "E1")  # work goes on while the rest is queued
    assert sim.work_backlog(2)  # E3, E4; more left
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["E3", "E4"]
    assert not sim.work_backlog(2)  # E5 fires, F waits for it
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["E5"]
    assert sim.cue("F").state is CueState.WAITING
    for cue in ("E2", "E3", "E4", "E5"):
        sim.complete("a", cue)
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["F"]
    sim.complete("a", "F")
    assert sim.run().status is RunStatus.SUCCESS
    assert sim.run().fired() == ["E1", "E2", "E3", "E4", "E5", "F"]


def test_a_successor_evaluated_before_its_turn_in_the_backlog_is_not_fired_twice() -> None:
    sim = Sim(plan_of(DIRECT))
    sim.start(chunk=1)  # A fires; B is queued
    assert sim.cue("B").state is CueState.PENDING
    sim.complete("a", "A")  # B fires now, as A's auto_follow
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["A", "B"]
    assert not sim.work_backlog()
    assert sim.take_sent(T.TASK_ASSIGN) == []
    assert sim.cue("B").attempt == 1


def test_a_restarted_engine_evaluates_the_cues_a_start_left_queued() -> None:
    sim = Sim(plan_of(WIDE))
    sim.start(chunk=3)
    assert len(sim.take_sent(T.TASK_ASSIGN)) == 3
    sim.restart()  # the hub died with E4 and E5 queued: only the store is left
    assert sim.cue("E4").state is CueState.PENDING
    assert not sim.work_backlog()
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["E4", "E5"]
    assert sim.cue("E1").attempt == 1 and len(sim.cue("E1").gos) == 1  # not fired again


def _fan(n: int) -> str:
    """One direct cue, then `n` direct cues that depend on it."""
    cues = ["  - {id: S, target_agents: [a], coordination: direct}"] + [
        f"  - {{id: F{i}, target_agents: [a], coordination: direct, depends_on: [S]}}"
        for i in range(n)
    ]
    return "cuelist: fan\ncues:\n" + "\n".join(cues) + "\n"


def test_a_completion_releasing_thousands_of_cues_fires_them_a_chunk_per_step() -> None:
    sim = Sim(plan_of(_fan(CHUNK + 10)))
    sim.start()
    sim.take_sent(T.TASK_ASSIGN)
    sim.complete("a", "S")
    assert len(sim.take_sent(T.TASK_ASSIGN)) == CHUNK  # no step holds the loop for all
    assert sim.cue(f"F{CHUNK}").state is CueState.WAITING
    assert not sim.work_backlog(CHUNK)
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == [
        f"F{i}" for i in range(CHUNK, CHUNK + 10)
    ]
    assert all(sim.cue(f"F{i}").attempt == 1 for i in range(CHUNK + 10))


def test_a_restarted_engine_fires_the_cues_a_completion_left_queued() -> None:
    sim = Sim(plan_of(_fan(CHUNK + 3)))
    sim.start()
    sim.complete("a", "S")
    assert len(sim.take_sent(T.TASK_ASSIGN)) == CHUNK + 1  # S, then the first chunk
    sim.restart()  # the hub died with 3 released cues still queued, WAITING in the store
    assert not sim.work_backlog()
    assert sorted(m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)) == [
        f"F{i}" for i in range(CHUNK, CHUNK + 3)
    ]
    assert all(len(sim.cue(f"F{i}").gos) == 1 for i in range(CHUNK + 3))  # none twice


def test_a_late_reply_is_counted_never_escalated() -> None:
    sim = Sim(plan_of(RETRY))
    sim.start()
    sim.ack_warning("a", "A")
    sim.advance(5.01)  # attempt 1 timed out (b slept); attempt 2 is called
    (timeout,) = sim.engine.escalations.by_id.values()
    sim.ack_warning("b", "A", attempt=1)  # b wakes: its ack is for an attempt that ended
    assert sim.run().record.late_replies == 1 and sim.outs[-1].late == 1
    assert list(sim.engine.escalations.by_id.values()) == [timeout]  # nothing new raised
    assert sim.run().record.protocol_violations == 0
    for agent in ("a", "b"):
        sim.ack_warning(agent, "A", attempt=2)
    for agent in ("a", "b"):
        sim.ack_standby(agent, "A", attempt=2)
    sim.complete("a", "A", attempt=2)
    sim.complete("b", "A", attempt=2)
    assert sim.run().status is RunStatus.SUCCESS
    sim.complete("b", "A", attempt=1)  # the old attempt's completion, after the run ended
    assert sim.run().record.late_replies == 2
    assert list(sim.engine.escalations.by_id.values()) == [timeout]


def test_a_reply_for_a_run_that_ended_and_was_forgotten_is_late_a_made_up_run_is_not() -> None:
    sim = Sim(plan_of(RETRY))
    sim.start()
    sim.engine.cancel("r1")
    sim._drain()
    sim.engine.forget("r1")  # as the driver does once the end is written
    sim.complete("a", "A")
    assert sim.outs[-1].late == 1 and not sim.outs[-1].escalations
    assert not sim.engine.escalations.by_id
    sim.complete("a", "A", run_id="never-was")
    (esc,) = sim.engine.escalations.by_id.values()
    assert esc.cause == "unknown_run:a"
    # ended long ago (not in memory) but still in Redis: the router tells the engine
    sim.engine.note_ended(["ended-before-a-restart"])
    sim.complete("a", "A", run_id="ended-before-a-restart")
    assert sim.outs[-1].late == 1 and esc.count == 1


def test_reasons_written_together_are_one_event_the_latest() -> None:
    """Acks that share one write (the driver's linger) change the reason several times; as
    they are stored at once, only the latest can ever be seen: one event, not one each."""
    wide = "cuelist: wide\ncues:\n  - {id: A, target_agents: [a, b, c, d]}\n"
    sim = Sim(plan_of(wide))
    sim.start()
    for agent in ("a", "b", "c"):  # no drain between: one outbox, as in one write
        msg = make(T.ACK_WARNING, p.AckWarning(), from_agent=agent, run_id="r1", cue_id="A")
        inputs.handle(sim.engine, msg)
    sim._drain()
    told = [e["reason"] for _, e in sim.outs[-1].events if e["type"] == "reason"]
    assert told == ["waiting for ack.warning from d"]


def test_results_are_kept_per_target_bounded_and_shown_with_the_completion() -> None:
    sim = Sim(plan_of(TWO_TARGETS.replace("[a, b]}", "[a, b], retries: 1}")))
    sim.start()
    for attempt in (1, 2):
        for agent in ("a", "b"):
            sim.ack_warning(agent, "A", attempt)
        for agent in ("a", "b"):
            sim.ack_standby(agent, "A", attempt)
        if attempt == 1:
            sim.complete("a", "A", passed=1)
            assert sim.cue("A").result == {"a": {"passed": 1}}
            sim.fail("b", "A")  # retried at once
            assert sim.cue("A").result == {}  # a new attempt's results only
    sim.complete("a", "A", attempt=2, passed=42)
    sim.complete("b", "A", attempt=2, log="x" * 10_000)
    result = sim.cue("A").result
    assert result["a"] == {"passed": 42}
    assert result["b"]["truncated"] is True and result["b"]["bytes"] > 10_000
    assert len(result["b"]["head"]) == 512
    done = [e for e in sim.events_of("cue") if e["state"] == "completed"]
    assert done[-1]["result"] == result  # in the cue's completion event
    assert cue_public(sim.cue("A")).result == result  # and in GET /v1/runs/{id}


def test_a_dry_run_walks_the_cues_a_completion_left_queued() -> None:
    from hub.engine.dry import dry_run
    from tests.hub.sim import KEYS

    run, _ = dry_run(plan_of(_fan(CHUNK + 5)), "d1", {}, KEYS)
    assert run.status is RunStatus.DRY
    assert run.counts() == {"completed": CHUNK + 6}
