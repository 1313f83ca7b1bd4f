"""`holding`: a run only an operator can move says so, and names what it needs (SPEC 5)."""

from __future__ import annotations

from protocols import payloads as p
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus, Severity
from tests.hub.sim import Sim, plan_of

RELEASE = """
cuelist: release
cues:
  - {id: BUILD, target_agents: [a], raises: [built]}
  - {id: TEST, target_agents: [b], depends_on: [BUILD], conditions: [built, approval_received]}
  - {id: DEPLOY, target_agents: [c], depends_on: [TEST], manual: true}
  - {id: NOTES, target_agents: [a], depends_on: [BUILD], manual: true}
"""


def _holds(sim: Sim) -> list[tuple[str, str | None]]:
    return [(e["status"], e.get("reason")) for e in sim.events_of("run")]


def test_a_run_holds_for_an_approval_and_an_armed_cue_and_runs_again_when_given() -> None:
    sim = Sim(plan_of(RELEASE))
    sim.start()
    sim.ack_warning("a", "BUILD")
    sim.ack_standby("a", "BUILD")
    # TEST waits for `built`, which BUILD (unfinished) raises: not the operator's to give
    assert sim.run().status is RunStatus.RUNNING and sim.run().hold_reason is None
    sim.complete("a", "BUILD")
    assert sim.cue("TEST").state is CueState.WAITING and sim.cue("NOTES").state is CueState.ARMED
    run = sim.run()
    assert run.status is RunStatus.HOLDING
    assert run.hold_reason == "condition approval_received; GO for NOTES"  # in cue order
    sim.engine.raise_condition("r1", "approval_received")
    sim._drain()
    assert sim.run().status is RunStatus.RUNNING and sim.run().hold_reason is None
    sim.call_through("TEST", ["b"])
    assert sim.cue("DEPLOY").state is CueState.ARMED
    assert sim.run().hold_reason == "GO for DEPLOY; GO for NOTES"
    sim.engine.operator_go("r1", "NOTES")
    sim._drain()
    assert sim.run().status is RunStatus.RUNNING  # NOTES is in its call: it moves
    sim.call_through("NOTES", ["a"])
    assert sim.run().hold_reason == "GO for DEPLOY"
    sim.engine.operator_go("r1", "DEPLOY")
    sim._drain()
    sim.call_through("DEPLOY", ["c"])
    assert sim.run().status is RunStatus.SUCCESS and sim.run().hold_reason is None
    assert _holds(sim) == [
        ("running", None),
        ("holding", "condition approval_received; GO for NOTES"),
        ("running", None),
        ("holding", "GO for DEPLOY; GO for NOTES"),
        ("running", None),
        ("holding", "GO for DEPLOY"),
        ("running", None),
        ("success", None),
    ]


def test_a_cue_waiting_only_on_a_held_predecessor_is_named_by_what_that_needs() -> None:
    sim = Sim(plan_of(RELEASE))
    sim.start()
    sim.call_through("BUILD", ["a"])
    # DEPLOY waits for TEST (which waits for the approval): it needs nothing of its own
    assert "DEPLOY" not in (sim.run().hold_reason or "")
    assert sim.cue("DEPLOY").state is CueState.WAITING


FAILED_RAISER = """
cuelist: raiser
cues:
  - {id: CHECK, target_agents: [a], raises: [checked], on_failure: continue}
  - {id: SHIP, target_agents: [b], depends_on: [CHECK], conditions: [checked]}
"""


def test_a_condition_only_a_failed_cue_would_have_raised_is_the_operators_to_give() -> None:
    sim = Sim(plan_of(FAILED_RAISER))
    sim.start()
    sim.ack_warning("a", "CHECK")
    sim.ack_standby("a", "CHECK")
    sim.fail("a", "CHECK")
    assert sim.cue("SHIP").state is CueState.WAITING  # fail-forward, but `checked` is missing
    assert sim.run().hold_reason == "condition checked"
    sim.engine.raise_condition("r1", "checked")
    sim._drain()
    assert sim.run().status is RunStatus.RUNNING
    sim.call_through("SHIP", ["b"])
    assert sim.run().status is RunStatus.PARTIAL


DIRECT = """
cuelist: direct
cues:
  - {id: A, target_agents: [a], coordination: direct}
"""


def test_gos_paused_by_a_critical_escalation_hold_the_run_until_it_is_resolved() -> None:
    sim = Sim(plan_of(DIRECT))
    body = p.EscalationError(severity=Severity.CRITICAL, cause="disk", detail="disk on fire")
    esc = sim.engine.escalate(None, None, T.ESCALATION_ERROR, body)
    sim.start()
    assert not sim.take_sent(T.TASK_ASSIGN)  # a direct cue's GO is its task.assign: held
    assert sim.run().status is RunStatus.HOLDING
    assert sim.run().hold_reason == f"GO paused: critical escalation {esc.id}"
    sim.engine.resolve(esc.id, None, "put out")
    sim._drain()
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["A"]  # fired again
    assert sim.run().status is RunStatus.RUNNING and sim.run().hold_reason is None
    sim.complete("a", "A")
    assert sim.run().status is RunStatus.SUCCESS


def test_a_run_waiting_for_a_resource_another_run_holds_is_not_holding() -> None:
    shared = """
cuelist: shared
cues:
  - {id: A, target_agents: [a], resources: [runner], coordination: direct}
"""
    plan = plan_of(shared)
    sim = Sim(plan)
    sim.start("r1")
    sim.start("r2", plan)
    assert sim.cue("A", "r2").state is CueState.WAITING  # queued: fired once it is free
    assert "runner" in (sim.cue("A", "r2").reason or "")
    assert sim.run("r2").status is RunStatus.RUNNING  # r1 will release it: no operator needed
    sim.complete("a", "A", run_id="r1")
    sim.complete("a", "A", run_id="r2")
    assert sim.run("r2").status is RunStatus.SUCCESS


def test_a_direct_cues_retry_paused_by_a_critical_escalation_is_assigned_on_resume() -> None:
    """The retry of a direct cue is held in `go` while GOs are paused, the cue still in GO;
    the resume once let only STANDBY, PENDING and WAITING cues go, so it stayed for ever."""
    sim = Sim(plan_of(DIRECT.replace("coordination: direct}", "coordination: direct, retries: 1}")))
    sim.start()
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["a"]
    body = p.EscalationError(severity=Severity.CRITICAL, cause="disk", detail="disk on fire")
    esc = sim.engine.escalate(None, None, T.ESCALATION_ERROR, body)
    sim.fail("a", "A", attempt=1)
    assert not sim.take_sent(T.TASK_ASSIGN)
    assert sim.run().hold_reason == f"GO paused: critical escalation {esc.id}"
    sim.engine.resolve(esc.id, None, "put out")
    sim._drain()
    assert [m.payload.attempt for _, m in sim.take_sent(T.TASK_ASSIGN)] == [2]  # type: ignore[attr-defined]
    sim.complete("a", "A", attempt=2)
    assert sim.run().status is RunStatus.SUCCESS


def test_an_operators_go_of_a_direct_cue_made_while_paused_goes_on_resume() -> None:
    """The operator GOs an armed direct cue while GOs are paused: its task.assign is held,
    the cue still armed. The resume once let only standby, pending and waiting cues go:
    the GO was not sent, and the run held on the resolved escalation's name until the
    operator GO'd it again."""
    sim = Sim(
        plan_of(DIRECT.replace("coordination: direct}", "coordination: direct, manual: true}"))
    )
    sim.start()
    body = p.EscalationError(severity=Severity.CRITICAL, cause="disk", detail="disk on fire")
    esc = sim.engine.escalate(None, None, T.ESCALATION_ERROR, body)
    sim.engine.operator_go("r1", "A")
    sim._drain()
    assert not sim.take_sent(T.TASK_ASSIGN)
    assert sim.run().hold_reason == f"GO paused: critical escalation {esc.id}"
    sim.engine.resolve(esc.id, None, "put out")
    sim._drain()
    assert [m.payload.attempt for _, m in sim.take_sent(T.TASK_ASSIGN)] == [1]  # type: ignore[attr-defined]
    assert sim.cue("A").gos[0]["fired_by"] == "operator"
    assert sim.run().status is RunStatus.RUNNING and sim.run().hold_reason is None
