"""Two runs competing for one resource under each strategy; escalation severity routing."""

from __future__ import annotations

import pytest

from hub.engine import guard
from protocols import payloads as p
from protocols.codec import make
from protocols.errors import Conflict
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus, Severity
from tests.hub.sim import Sim, plan_of

ONE = """
cuelist: {name}
conflict_strategy: {strategy}
arbitration_timeout_s: 10
cues:
  - {{id: {cue}, target_agents: [{agent}], resources: [runner], priority: {priority}}}
"""


def _two_runs(strategy: str) -> Sim:
    """Run r1 calls LOW (priority 1) and r2 calls HIGH (priority 9): both want `runner`."""
    low = plan_of(ONE.format(name="low", strategy=strategy, cue="LOW", agent="a", priority=1))
    high = plan_of(ONE.format(name="high", strategy=strategy, cue="HIGH", agent="b", priority=9))
    sim = Sim(low, high)
    sim.start("r1", low)
    sim.ack_warning("a", "LOW", run_id="r1")
    assert sim.cue("LOW", "r1").state is CueState.STANDBY  # LOW holds the runner
    sim.start("r2", high)
    return sim


def test_priority_stands_down_a_lower_cue_not_yet_gone() -> None:
    sim = _two_runs("priority")
    sim.ack_warning("b", "HIGH", run_id="r2")
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY  # took the runner
    low = sim.cue("LOW", "r1")
    assert low.state is CueState.WAITING and "re-queued" in (low.reason or "")
    assert [m.cue_id for _, m in sim.take_sent(T.COORD_STANDDOWN)] == ["LOW"]
    sim.ack_standby("b", "HIGH", run_id="r2")
    sim.complete("b", "HIGH", run_id="r2")
    assert sim.cue("LOW", "r1").state is CueState.WARNING  # called again
    assert sim.cue("LOW", "r1").attempt == 2
    sim.call_through("LOW", ["a"], attempt=2, run_id="r1")
    assert sim.run("r1").status is RunStatus.SUCCESS


def test_priority_never_preempts_running_work() -> None:
    sim = _two_runs("priority")
    sim.ack_standby("a", "LOW", run_id="r1")
    assert sim.cue("LOW", "r1").state is CueState.GO
    sim.ack_warning("b", "HIGH", run_id="r2")
    high = sim.cue("HIGH", "r2")
    assert high.state is CueState.WARNING and "runner" in (high.reason or "")
    assert sim.cue("LOW", "r1").state is CueState.GO
    sim.complete("a", "LOW", run_id="r1")
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY


def test_fcfs_first_claim_goes_second_waits() -> None:
    sim = _two_runs("fcfs")
    sim.ack_warning("b", "HIGH", run_id="r2")
    assert sim.cue("HIGH", "r2").state is CueState.WARNING  # waits despite higher priority
    assert "r1/LOW" in (sim.cue("HIGH", "r2").reason or "")
    assert sim.cue("LOW", "r1").state is CueState.STANDBY
    sim.ack_standby("a", "LOW", run_id="r1")
    sim.complete("a", "LOW", run_id="r1")
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY


def test_arbitration_opens_a_conflict_and_the_resolution_binds() -> None:
    sim = _two_runs("arbitration")
    sim.ack_warning("b", "HIGH", run_id="r2")
    (esc,) = [e for e in sim.engine.escalations.by_id.values() if e.type is T.ESCALATION_CONFLICT]
    assert esc.payload["conflict_type"] == "resource"
    assert esc.payload["resource_in_question"] == "runner"
    assert esc.payload["suggested_winner"] == "b"  # the higher priority
    assert sorted(esc.payload["agents_involved"]) == ["a", "b"]
    sim.engine.resolve(esc.id, "r1/LOW", "LOW keeps it")  # binding, against the suggestion
    sim._drain()
    assert sim.cue("LOW", "r1").state is CueState.STANDBY
    assert sim.cue("HIGH", "r2").state is CueState.WARNING
    sim.ack_standby("a", "LOW", run_id="r1")
    sim.complete("a", "LOW", run_id="r1")
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY


def test_a_winner_refused_leaves_the_conflict_open_for_a_right_one() -> None:
    """The escalation was marked resolved before the winner was checked, and a step's
    partial effects are committed with its refusal: the operator got a 409, the conflict
    read resolved with the bogus winner, and the right one was refused as already resolved."""
    sim = _two_runs("arbitration")
    sim.ack_warning("b", "HIGH", run_id="r2")
    (esc,) = [e for e in sim.engine.escalations.by_id.values() if e.type is T.ESCALATION_CONFLICT]
    with pytest.raises(Conflict, match="is not one of"):
        sim.engine.resolve(esc.id, "r1-prefix/LOW", "a run id cut short")
    assert esc.status != "resolved" and esc.resolution is None
    sim.engine.resolve(esc.id, "r1/LOW", "LOW keeps it")
    sim._drain()
    assert esc.status == "resolved" and sim.cue("LOW", "r1").state is CueState.STANDBY


def test_arbitration_falls_back_to_priority_after_timeout() -> None:
    sim = _two_runs("arbitration")
    sim.ack_warning("b", "HIGH", run_id="r2")
    sim.advance(10.5)
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY
    assert sim.cue("LOW", "r1").state is CueState.WAITING


def test_multi_resource_claims_are_all_or_nothing() -> None:
    plan = plan_of("""
cuelist: multi
conflict_strategy: fcfs
start: [X, Y, Z]
cues:
  - {id: X, target_agents: [a], resources: [db, cache]}
  - {id: Y, target_agents: [b], resources: [cache, queue]}
  - {id: Z, target_agents: [c], resources: [queue]}
""")
    sim = Sim(plan)
    sim.start()
    for agent, cue in (("a", "X"), ("b", "Y"), ("c", "Z")):
        sim.ack_warning(agent, cue)
    assert sim.cue("X").state is CueState.STANDBY
    assert sim.cue("Y").state is CueState.WARNING  # cache is held: Y holds nothing
    assert sim.cue("Y").holds == []
    assert sim.engine.book.holder_of("queue") is None  # nothing held while waiting
    assert sim.cue("Z").state is CueState.WARNING  # fcfs: queued behind Y, which came first
    sim.ack_standby("a", "X")
    sim.complete("a", "X")
    assert sim.cue("Y").state is CueState.STANDBY  # both of its resources at once
    assert sim.cue("Z").state is CueState.WARNING
    sim.ack_standby("b", "Y")
    sim.complete("b", "Y")
    assert sim.cue("Z").state is CueState.STANDBY


@pytest.mark.parametrize(
    ("severity", "recorded_as", "notice"),
    [(Severity.LOW, Severity.LOW, False), (Severity.MEDIUM, Severity.MEDIUM, False),
     (Severity.HIGH, Severity.HIGH, True), (Severity.CRITICAL, Severity.HIGH, True)],
)  # fmt: skip
def test_specialist_escalations_route_by_severity_capped_at_high(
    severity: Severity, recorded_as: Severity, notice: bool
) -> None:
    sim = Sim(plan_of("cuelist: one\ncues:\n  - {id: A, target_agents: [a]}\n"))
    sim.start()
    body = p.EscalationError(severity=severity, cause="disk", detail="disk on fire")
    for n in range(3):
        body = body.model_copy(update={"cause": f"disk {n}"})  # its own words: not a slot
        msg = make(T.ESCALATION_ERROR, body, from_agent="a", run_id="r1", cue_id="A")
        guard.specialist_escalation(sim.engine, msg, Severity.HIGH)
        sim._drain()
    (esc,) = sim.engine.escalations.by_id.values()
    assert esc.count == 3  # one slot (run, cue, type, sender), counted
    assert (esc.raised_by, esc.severity) == ("a", recorded_as)
    assert esc.payload["cause"] == "disk 0"  # the first one's words are kept
    assert esc.status == ("recorded" if severity is Severity.LOW else "open")
    assert bool(sim.take_sent(T.BROADCAST_NOTICE)) is notice
    assert sim.engine.paused is None  # a specialist never pauses everything


def test_the_operator_cap_on_specialist_severity() -> None:
    sim = Sim(plan_of("cuelist: one\ncues:\n  - {id: A, target_agents: [a]}\n"))
    sim.start()
    body = p.EscalationError(severity=Severity.HIGH, detail="meh")
    msg = make(T.ESCALATION_ERROR, body, from_agent="a", run_id="r1")
    guard.specialist_escalation(sim.engine, msg, Severity.LOW)
    sim._drain()
    (esc,) = sim.engine.escalations.by_id.values()
    assert (esc.severity, esc.status, esc.cue_id) == (Severity.LOW, "recorded", None)
    assert not sim.take_sent(T.BROADCAST_NOTICE)


def test_a_critical_escalation_of_the_hub_pauses_gos_until_resolved() -> None:
    sim = Sim(plan_of("cuelist: one\ncues:\n  - {id: A, target_agents: [a]}\n"))
    sim.start()
    body = p.EscalationError(severity=Severity.CRITICAL, cause="disk", detail="disk on fire")
    esc = sim.engine.escalate(sim.run(), "A", T.ESCALATION_ERROR, body)
    sim._drain()
    assert esc.raised_by == "hub"
    assert sim.take_sent(T.BROADCAST_NOTICE) and sim.engine.paused is not None
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    assert sim.cue("A").state is CueState.STANDBY  # GO held while paused
    assert sim.run().status is RunStatus.HOLDING
    sim.engine.resolve(esc.id, None, "fixed")
    sim._drain()
    assert sim.cue("A").state is CueState.GO
    assert sim.run().status is RunStatus.RUNNING


DESK_ARBITRATION = """
cuelist: desk-arbitration
conflict_strategy: arbitration
arbitration_timeout_s: 300
cues:
  - {id: START-100, target_agents: [code]}
  - {id: HOTFIX-200, target_agents: [build], depends_on: [START-100], resources: [runner],
     priority: 10}
  - {id: NIGHTLY-210, target_agents: [test], depends_on: [START-100], resources: [runner],
     priority: 1}
"""


@pytest.mark.parametrize("winner", ["NIGHTLY-210", "HOTFIX-200"])
def test_an_operator_may_pick_the_waiting_cue_over_a_holder_in_standby(winner: str) -> None:
    """The desk's browser test found it: HOTFIX (priority 10) holds the runner in STANDBY,
    NIGHTLY (priority 1) waits; the operator picks NIGHTLY. HOTFIX is stood down and
    re-queued; NIGHTLY must then take the runner (it waited behind the higher-priority
    waiter, which waited for it: both stuck until the arbitration timeout). Picking the
    holder keeps it going."""
    sim = Sim(plan_of(DESK_ARBITRATION))
    sim.start()
    sim.call_through("START-100", ["code"])
    sim.ack_warning("build", "HOTFIX-200")  # claims the runner first: STANDBY
    sim.ack_warning("test", "NIGHTLY-210")  # prepared, but the runner is taken
    assert sim.cue("HOTFIX-200").state is CueState.STANDBY
    assert sim.cue("NIGHTLY-210").state is CueState.WARNING
    (esc,) = [e for e in sim.engine.escalations.by_id.values() if e.type is T.ESCALATION_CONFLICT]
    sim.engine.resolve(esc.id, f"r1/{winner}", "the operator's call")
    sim._drain()
    loser = "HOTFIX-200" if winner == "NIGHTLY-210" else "NIGHTLY-210"
    agents = {"HOTFIX-200": "build", "NIGHTLY-210": "test"}
    assert sim.cue(winner).state is CueState.STANDBY and sim.cue(winner).holds == ["runner"]
    sim.ack_standby(agents[winner], winner)
    sim.complete(agents[winner], winner)
    attempt = sim.cue(loser).attempt  # the holder stood down is called again
    if winner == "NIGHTLY-210":
        assert attempt == 2
        sim.ack_warning("build", loser, attempt)
    assert sim.cue(loser).state is CueState.STANDBY
    sim.ack_standby(agents[loser], loser, attempt)
    sim.complete(agents[loser], loser, attempt)
    assert sim.run().status is RunStatus.SUCCESS
    assert sim.now == 1_000.0  # no timeout was needed
