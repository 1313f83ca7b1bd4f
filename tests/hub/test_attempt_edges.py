"""What belongs to which attempt: replies, handoffs and usage from a target replaced, late,
stood down or failed change nothing of the attempt that follows; a held or queued cue is
called again only when what holds it lets go (engine level)."""

from __future__ import annotations

from typing import Any

from hub.engine.core import Engine
from hub.store.layout import read_run
from protocols import payloads as p
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus, Severity
from protocols.targeting import Candidate
from tests.hub.sim import KEYS, Sim, plan_of
from tests.hub.test_conflicts_runtime import _two_runs

REASSIGNED = """
cuelist: reassigned
specialists:
  a: {provides: [build]}
  b: {provides: [build]}
cues:
  - id: BUILD
    TARGET
    coordination: direct
    on_repeated_failure: {after: 1, debugger: doc, timeout_s: 60}
"""


def _reassigned(target: str) -> tuple[Sim, str, str]:
    """BUILD's first target failed and its debugger reassigned attempt 2 to the other."""
    sim = Sim(plan_of(REASSIGNED.replace("TARGET", target)))
    sim.engine.directory = {x: Candidate(x, provides=("build",)) for x in ("a", "b")}
    sim.engine.directory["doc"] = Candidate("doc")
    sim.start()
    (loser,) = [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]
    other = "b" if loser == "a" else "a"
    sim.fail(loser, "BUILD", attempt=1)
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["doc"]
    sim.complete("doc", "BUILD", attempt=1, decision="reassign", diagnosis="flaky", to=other)
    assert [(a, m.payload.attempt) for a, m in sim.take_sent(T.TASK_ASSIGN)] == [(other, 2)]
    return sim, loser, other


def _done(sim: Sim, agent: str, attempt: int, tokens: int, **result: Any) -> None:
    body = p.StatusCompleted(attempt=attempt, result=result, usage=p.Usage(tokens=tokens))
    sim.send(agent, T.STATUS_COMPLETED, body, "r1", "BUILD")


def test_a_reassigned_capability_cue_is_completed_by_its_new_agent_only() -> None:
    sim, loser, other = _reassigned("target: {provides: [build], count: 1}")
    _done(sim, loser, 2, tokens=7, evil=1)  # the agent taken off the cue
    assert sim.cue("BUILD").state is CueState.GO and sim.run().usage.tokens == 0
    _done(sim, other, 2, tokens=5, ok=1)
    assert sim.cue("BUILD").state is CueState.COMPLETED
    assert sim.cue("BUILD").result == {other: {"ok": 1}} and sim.run().usage.tokens == 5


def test_a_replaced_named_target_can_neither_complete_nor_fail_the_new_attempt() -> None:
    sim, loser, other = _reassigned("target_agents: [a]")
    _done(sim, loser, 2, tokens=999, evil=1)
    sim.fail(loser, "BUILD", attempt=2, error="sabotage")
    cr = sim.cue("BUILD")
    assert cr.state is CueState.GO and loser not in cr.targets and sim.run().usage.tokens == 0
    _done(sim, other, 2, tokens=1)
    assert sim.cue("BUILD").state is CueState.COMPLETED


HANDED = """
cuelist: handed
specialists:
  a: {provides: [build], handoff_to: [c]}
  b: {provides: [build], handoff_to: [c]}
  c: {}
cues:
  - id: BUILD
    target_agents: [a]
    coordination: COORD
    handoff: {to: c}
    EXTRA
  - {id: SHIP, target_agents: [c], coordination: direct, depends_on: [BUILD]}
"""


def _hand(sim: Sim, agent: str, attempt: int, artifact: str) -> None:
    body = p.TaskHandoff(
        from_agent=agent, to_agent="c", task_id="BUILD", attempt=attempt,
        handoff_context=p.HandoffContext(artifact=artifact),
    )  # fmt: skip
    sim.send(agent, T.TASK_HANDOFF, body, cue_id="BUILD")


def _shipped(sim: Sim) -> list[Any]:
    return [m.payload.context.get("artifact") for a, m in sim.take_sent(T.TASK_ASSIGN) if a == "c"]


def test_a_direct_cues_retry_hands_off_its_own_work() -> None:
    sim = Sim(plan_of(HANDED.replace("COORD", "direct").replace("EXTRA", "retries: 1")))
    sim.start()
    _hand(sim, "a", 1, "s3://attempt-1-broken")
    sim.fail("a", "BUILD", attempt=1)
    _hand(sim, "a", 2, "s3://attempt-2-good")
    sim.complete("a", "BUILD", attempt=2)
    assert _shipped(sim) == ["s3://attempt-2-good"]


def test_a_handoff_sent_for_another_attempt_or_while_the_debugger_is_asked_is_late() -> None:
    extra = "on_repeated_failure: {after: 1, debugger: doc, timeout_s: 60}"
    sim = Sim(plan_of(HANDED.replace("COORD", "direct").replace("EXTRA", extra)))
    sim.engine.directory = {x: Candidate(x) for x in ("a", "b", "c", "doc")}
    sim.start()
    _hand(sim, "a", 2, "evil://not-yet")  # an attempt not yet assigned
    sim.fail("a", "BUILD", attempt=1)
    _hand(sim, "a", 1, "evil://from-the-failed-attempt")  # while doc is asked
    assert not sim.take_sent(T.TASK_HANDOFF) and not sim.cue("BUILD").handoff_ok
    late = sim.run().record.late_replies
    sim.complete("doc", "BUILD", attempt=1, decision="reassign", diagnosis="x", to="b")
    _hand(sim, "a", 2, "evil://from-the-replaced-agent")
    assert sim.run().record.late_replies == late + 1
    _hand(sim, "b", 2, "s3://good")
    sim.complete("b", "BUILD", attempt=2)
    assert _shipped(sim) == ["s3://good"]
    assert sim.run().record.protocol_violations == 0  # late, each of them: not escalated


def test_the_late_handoff_of_a_timed_out_attempt_is_not_the_next_ones() -> None:
    extra = "retries: 1\n    go_timeout_s: 10"
    sim = Sim(plan_of(HANDED.replace("COORD", "cued").replace("EXTRA", extra)))
    sim.start()
    sim.ack_warning("a", "BUILD")
    sim.ack_standby("a", "BUILD")
    sim.advance(11)  # attempt 1 times out: attempt 2 is warned
    assert sim.cue("BUILD").attempt == 2 and sim.cue("BUILD").state is CueState.WARNING
    _hand(sim, "a", 1, "s3://attempt-1")  # attempt 1's, late
    assert not sim.take_sent(T.TASK_HANDOFF) and not sim.cue("BUILD").handoff_ok
    sim.call_through("BUILD", ["a"], attempt=2)  # completes with no handoff of its own
    assert sim.cue("BUILD").state is CueState.FAILED
    assert "without the handoff to c" in (sim.cue("BUILD").error or "")


LATE = """
cuelist: late
budget: {tokens: 1500}
cues:
  - {id: A, target_agents: [slow], coordination: direct, go_timeout_s: 10, retries: 5}
"""


def test_usage_a_late_completion_reports_is_counted_once() -> None:
    sim = Sim(plan_of(LATE))
    sim.start()
    for attempt in (1, 2):
        assert [m.payload.attempt for _, m in sim.take_sent(T.TASK_ASSIGN)] == [attempt]
        sim.advance(10.01)  # past the GO deadline: the next attempt is assigned
        body = p.StatusCompleted(attempt=attempt, usage=p.Usage(tokens=1000))
        sim.send("slow", T.STATUS_COMPLETED, body, "r1", "A")
        sim.send("slow", T.STATUS_COMPLETED, body, "r1", "A")  # a copy, a new message id
    assert sim.run().usage.tokens == 2000  # each attempt's work once
    assert [m.payload.attempt for _, m in sim.take_sent(T.TASK_ASSIGN)] == [3]
    sim.advance(10.01)
    assert not sim.take_sent(T.TASK_ASSIGN)  # spent: attempt 4 is held
    assert sim.cue("A").reason == "GO paused: budget tokens spent 2,000 / 1,500"


SHARED_DIRECT = """
cuelist: {name}
conflict_strategy: priority
cues:
  - {{id: {cue}, target_agents: [{agent}], resources: [runner], priority: 5{extra}}}
"""


def test_a_direct_retry_that_loses_its_resource_is_assigned_once_it_is_free() -> None:
    x = plan_of(SHARED_DIRECT.format(name="x", cue="X", agent="a", extra=", coordination: "
                                     "direct, retries: 1"))  # fmt: skip
    y = plan_of(SHARED_DIRECT.format(name="y", cue="Y", agent="b", extra=""))
    sim = Sim(x, y)
    sim.start("r1", x)
    sim.start("r2", y)
    sim.ack_warning("b", "Y", run_id="r2")  # Y waits for the runner X holds
    sim.take_sent()
    sim.fail("a", "X", run_id="r1")  # the runner goes to Y; X's retry waits
    assert sim.cue("X", "r1").state is CueState.WAITING
    sim.fail("a", "X", run_id="r1")  # its failure again (a copy): late
    assert sim.cue("X", "r1").retries_used == 1
    sim.ack_standby("b", "Y", run_id="r2")
    sim.complete("b", "Y", run_id="r2")  # the runner is free again
    assert [m.payload.attempt for _, m in sim.take_sent(T.TASK_ASSIGN)] == [2]
    sim.complete("a", "X", attempt=2, run_id="r1")
    assert sim.run("r1").status is RunStatus.SUCCESS


def _critical(sim: Sim) -> str:
    body = p.EscalationError(severity=Severity.CRITICAL, cause="disk", detail="disk on fire")
    esc = sim.engine.escalate(None, None, T.ESCALATION_ERROR, body)
    sim._drain()
    return str(esc.id)


def test_a_ready_standby_held_by_a_pause_does_not_time_out() -> None:
    sim = Sim(plan_of("cuelist: one\ndefaults: {standby_timeout_s: 60}\n"
                      "cues:\n  - {id: A, target_agents: [a]}\n"))  # fmt: skip
    sim.start()
    sim.ack_warning("a", "A")
    esc = _critical(sim)
    sim.ack_standby("a", "A")  # every target ready; the GO is held
    sim.advance(61)  # the operator takes a minute
    assert sim.cue("A").state is CueState.STANDBY and sim.run().status is RunStatus.HOLDING
    sim.engine.resolve(esc, None, "put out")
    sim._drain()
    assert sim.cue("A").state is CueState.GO


def test_a_late_ack_of_a_cue_stood_down_for_priority_is_late_not_a_violation() -> None:
    sim = _two_runs("priority")
    sim.ack_warning("b", "HIGH", run_id="r2")  # LOW, in STANDBY, is stood down and queued
    assert sim.cue("LOW", "r1").state is CueState.WAITING
    sim.ack_standby("a", "LOW", run_id="r1")  # it crossed the coord.standdown
    assert sim.run("r1").record.protocol_violations == 0
    assert sim.run("r1").record.late_replies == 1


def _leader_changes(sim: Sim) -> None:
    """A new engine resumes the active runs, the resource book and the pause flag from
    what the store holds (as Driver.load reads them back)."""
    book, paused, plans = sim.engine.book, sim.engine.paused, dict(sim.engine.plans)
    stored = {run_id: read_run(fields) for run_id, fields in sim.persisted.items()}
    sim.engine = Engine(KEYS, clock=lambda: sim.now)
    sim.engine.book, sim.engine.paused = book, paused
    for run_id, run in stored.items():
        if run is not None and not run.status.done:
            sim.engine.adopt(run, plans[run_id])
    sim._drain()
    sim.work_backlog()


def test_a_new_leader_holds_a_cue_whose_debugger_a_pause_held_back() -> None:
    repeated = "on_repeated_failure: {after: 1, debugger: doc, timeout_s: 60}"
    sim = Sim(plan_of(f"cuelist: dbg\ncues:\n  - {{id: A, target_agents: [a], {repeated}}}\n"))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    esc = _critical(sim)
    sim.fail("a", "A")
    sim.take_sent()
    _leader_changes(sim)
    assert not sim.take_sent() and sim.cue("A").state is CueState.WAITING
    sim.engine.resume(f"{esc} resolved")  # the operator's broadcast.resume
    sim._drain()
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["doc"]  # asked, not retried


def test_a_new_leader_does_not_call_a_cue_queued_behind_a_higher_priority() -> None:
    sim = _two_runs("priority")
    sim.ack_warning("b", "HIGH", run_id="r2")  # LOW stood down and queued
    sim.take_sent()
    _leader_changes(sim)
    assert not sim.take_sent()  # HIGH still holds the runner
    sim.ack_standby("b", "HIGH", run_id="r2")
    sim.complete("b", "HIGH", run_id="r2")
    assert [m.cue_id for _, m in sim.take_sent(T.COORD_WARNING)] == ["LOW"]


def test_a_debuggers_late_diagnosis_is_counted_once_and_decides_nothing() -> None:
    repeated = "on_repeated_failure: {after: 1, debugger: doc, timeout_s: 60}"
    cues = f"  - {{id: A, target_agents: [a], {repeated}}}\n  - {{id: B, target_agents: [b]}}\n"
    sim = Sim(plan_of(f"cuelist: dbg\ncues:\n{cues}"))  # B keeps the run going
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    sim.fail("a", "A")
    sim.advance(61)  # doc gave no diagnosis in time: the cue fails
    assert sim.cue("A").state is CueState.FAILED
    late = p.StatusCompleted(attempt=1, result={"decision": "retry"}, usage=p.Usage(tokens=50))
    sim.send("doc", T.STATUS_COMPLETED, late, "r1", "A")
    sim.send("doc", T.STATUS_COMPLETED, late, "r1", "A")  # a copy
    assert sim.run().usage.tokens == 50 and sim.cue("A").state is CueState.FAILED


GPU = """
cuelist: gpu
cues:
  - id: TRAIN
    target: {filter: labels.gpu, count: 1}
    coordination: direct
    on_repeated_failure: {after: 1, debugger: doc, timeout_s: 60, max_consults: 2}
"""


def test_a_reassign_of_a_capability_cue_picks_only_agents_its_target_matches() -> None:
    sim = Sim(plan_of(GPU))
    gpu = {"gpu": True}
    sim.engine.directory = {
        "a": Candidate("a", provides=("train",), labels=gpu),
        "b": Candidate("b", provides=("train",), labels=gpu),
        "cpu": Candidate("cpu", provides=("train",)),  # provides the same, no GPU
        "doc": Candidate("doc", labels=gpu),  # the debugger matches too: never a target
    }
    sim.start()
    (first,) = [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]
    sim.fail(first, "TRAIN")
    ((asked, debug),) = sim.take_sent(T.TASK_ASSIGN)
    offered = debug.payload.action["debug"]["candidates"]
    assert asked == "doc" and offered == sorted({"a", "b"} - {first})
    sim.complete("doc", "TRAIN", attempt=1, decision="reassign", diagnosis="x", to="cpu")
    assert sim.cue("TRAIN").state is CueState.FAILED  # refused: cpu has no GPU
    assert "only online agents" in (sim.cue("TRAIN").error or "")
