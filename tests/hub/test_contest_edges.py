"""Edges of resource contests: arbitration decisions and their timers, a second conflict,
a waiter whose predecessor runs again, and pauses held by more than one critical."""

from __future__ import annotations

from protocols import payloads as p
from protocols.messages import MessageType as T
from protocols.states import CueState, Severity
from tests.hub.sim import Sim, plan_of
from tests.hub.test_conflicts_runtime import ONE, _two_runs


def _conflicts(sim: Sim) -> list[tuple[str, str | None, str]]:
    """(run, cue, status) of every conflict escalation the engine holds, oldest first."""
    escs = sim.engine.escalations.by_id.values()
    return [(e.run_id or "", e.cue_id, e.status) for e in escs if e.type is T.ESCALATION_CONFLICT]


def _open_conflict_id(sim: Sim, run_id: str, cue_id: str) -> str:
    (esc,) = [
        e for e in sim.engine.escalations.by_id.values()
        if e.type is T.ESCALATION_CONFLICT and e.status == "open"
        and (e.run_id, e.cue_id) == (run_id, cue_id)
    ]  # fmt: skip
    return esc.id


def test_an_arbitration_for_the_holder_binds_past_the_timeout() -> None:
    """The operator kept `runner` for LOW, its holder in STANDBY; nothing recorded the
    decision, and the arbitration timer (10 s) then fell back to priority: LOW was stood
    down and HIGH took the runner against the binding decision."""
    sim = _two_runs("arbitration")
    sim.ack_warning("b", "HIGH", run_id="r2")
    sim.engine.resolve(_open_conflict_id(sim, "r2", "HIGH"), "r1/LOW", "LOW keeps it")
    sim._drain()
    sim.take_sent()
    sim.advance(10.5)
    assert sim.cue("LOW", "r1").state is CueState.STANDBY
    assert sim.cue("LOW", "r1").holds == ["runner"]
    assert sim.cue("HIGH", "r2").state is CueState.WARNING  # waits for LOW, as decided
    assert not sim.take_sent(T.COORD_STANDDOWN)
    decided = "HIGH: r1/LOW keeps runner by the operator's arbitration"
    assert sim.run("r1").record.conflicts == [decided]
    assert sim.run("r2").record.conflicts == [decided]  # and no "timed out"
    sim.ack_standby("a", "LOW", run_id="r1")
    sim.complete("a", "LOW", run_id="r1")
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY  # its turn, after the holder


def test_a_second_conflict_of_a_cue_is_a_new_escalation() -> None:
    """HIGH won its conflict, failed, and its retry met another holder: that conflict was
    counted on the first escalation, already resolved, so no operator was asked and the
    timer alone decided it."""
    low = plan_of(ONE.format(name="low", strategy="arbitration", cue="LOW", agent="a", priority=1))
    high_text = ONE.format(name="high", strategy="arbitration", cue="HIGH", agent="b", priority=9)
    high = plan_of(high_text.replace("priority: 9}", "priority: 9, retries: 1}"))
    sim = Sim(low, high)
    sim.start("r1", low)
    sim.ack_warning("a", "LOW", run_id="r1")
    sim.start("r2", high)
    sim.ack_warning("b", "HIGH", run_id="r2")
    first = _open_conflict_id(sim, "r2", "HIGH")
    sim.engine.resolve(first, "r2/HIGH", "HIGH first")
    sim._drain()
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY
    sim.ack_standby("b", "HIGH", run_id="r2")
    sim.fail("b", "HIGH", run_id="r2")  # the runner goes back to LOW, re-queued behind it
    sim.ack_warning("a", "LOW", attempt=2, run_id="r1")
    assert sim.cue("LOW", "r1").state is CueState.STANDBY
    sim.ack_warning("b", "HIGH", attempt=2, run_id="r2")
    second = sim.engine.escalations.get(_open_conflict_id(sim, "r2", "HIGH"))
    assert second is not None and second.id != first and second.count == 1
    assert second.payload["cues_involved"] == ["r2/HIGH", "r1/LOW"]
    sim.engine.resolve(second.id, "r1/LOW", "LOW this time")
    sim._drain()
    sim.advance(10.5)
    assert sim.cue("LOW", "r1").state is CueState.STANDBY  # the second decision binds too
    assert sim.cue("HIGH", "r2").state is CueState.WARNING


def test_a_waiter_the_holder_was_chosen_over_is_not_asked_about_again() -> None:
    """HIGH, told to wait for LOW, claims again while LOW holds the runner (here a copy
    of its ack): the decision stands, no new escalation and no new timer."""
    sim = _two_runs("arbitration")
    sim.ack_warning("b", "HIGH", run_id="r2")
    sim.engine.resolve(_open_conflict_id(sim, "r2", "HIGH"), "r1/LOW", "LOW keeps it")
    sim._drain()
    sim.engine.retry_waiters([sim.engine.book.waiting[("r2", "HIGH")]])  # claims again
    sim._drain()
    assert _conflicts(sim) == [("r2", "HIGH", "resolved")]
    assert sim.cue("HIGH", "r2").state is CueState.WARNING
    sim.advance(10.5)
    assert sim.cue("LOW", "r1").state is CueState.STANDBY


THREE = """
cuelist: {name}
conflict_strategy: arbitration
arbitration_timeout_s: 10
cues:
  - {{id: {cue}, target_agents: [{agent}], resources: [runner], priority: {priority}}}
"""


def test_an_earlier_conflicts_timer_leaves_a_new_one_its_full_time() -> None:
    """HIGH lost its first conflict to LOW (in GO); when LOW finished, MID (picked over LOW
    by the operator) took the runner and HIGH's second conflict opened, in the same attempt.
    The first conflict's timer then decided the second one 3 s after it opened."""
    plans = {
        name: plan_of(THREE.format(name=name, cue=name.upper(), agent=agent, priority=prio))
        for name, agent, prio in (("low", "a", 1), ("mid", "m", 5), ("high", "b", 9))
    }
    sim = Sim(*plans.values())
    sim.start("r1", plans["low"])
    sim.ack_warning("a", "LOW", run_id="r1")
    sim.ack_standby("a", "LOW", run_id="r1")
    assert sim.cue("LOW", "r1").state is CueState.GO
    sim.start("r2", plans["high"])
    sim.ack_warning("b", "HIGH", run_id="r2")  # first conflict: its timer at +10 s
    sim.engine.resolve(_open_conflict_id(sim, "r2", "HIGH"), "r1/LOW", "LOW goes on")
    sim.advance(2)
    sim.start("r3", plans["mid"])
    sim.ack_warning("m", "MID", run_id="r3")
    sim.engine.resolve(_open_conflict_id(sim, "r3", "MID"), "r3/MID", "MID next")
    sim.advance(1)
    sim.complete("a", "LOW", run_id="r1")  # MID takes the runner: HIGH's second conflict
    assert sim.cue("MID", "r3").state is CueState.STANDBY
    second = _open_conflict_id(sim, "r2", "HIGH")
    sim.advance(7.5)  # past the first conflict's timer, 7.5 s into the second
    assert sim.cue("MID", "r3").state is CueState.STANDBY
    assert sim.cue("HIGH", "r2").state is CueState.WARNING
    assert _open_conflict_id(sim, "r2", "HIGH") == second
    sim.advance(3)  # the second conflict's own timer: priority decides
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY
    assert sim.cue("MID", "r3").state is CueState.WAITING


HOLD = """
cuelist: hold
cues:
  - {id: H, target_agents: [h], resources: [runner]}
"""
CHAIN = """
cuelist: chain
cues:
  - {id: A, target_agents: [a], on_failure: continue, auto_follow: B}
  - {id: B, target_agents: [b], resources: [runner]}
"""


def test_a_waiter_whose_predecessor_runs_again_takes_no_standby_until_it_is_done() -> None:
    """B, prepared and waiting for the runner, went to STANDBY the moment it was freed,
    though the operator had retried its predecessor A, which was running again."""
    hold, chain = plan_of(HOLD), plan_of(CHAIN)
    sim = Sim(hold, chain)
    sim.start("r0", hold)
    sim.ack_warning("h", "H", run_id="r0")  # H holds the runner
    sim.start("r1", chain)
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    sim.fail("a", "A")  # on_failure continue: B is called
    sim.ack_warning("b", "B")  # prepared, waits for the runner
    assert sim.cue("B").state is CueState.WARNING
    sim.engine.retry_cue("r1", "A")
    sim._drain()
    assert sim.cue("A").state is CueState.WARNING and sim.cue("A").attempt == 2
    sim.take_sent()
    sim.ack_standby("h", "H", run_id="r0")
    sim.complete("h", "H", run_id="r0")  # the runner is free
    assert sim.cue("B").state is CueState.WARNING
    assert sim.cue("B").reason == "prepared: waiting for its predecessor to complete"
    assert not sim.take_sent(T.COORD_STANDBY)
    assert sim.engine.book.holder_of("runner") is None  # not held for a cue that cannot use it
    sim.call_through("A", ["a"], attempt=2)
    assert sim.cue("B").state is CueState.STANDBY and sim.cue("B").holds == ["runner"]


def test_a_cue_still_warned_when_its_predecessor_runs_again_takes_no_standby_either() -> None:
    """B's last ack.warning came after the operator retried A: B went to STANDBY then."""
    sim = Sim(plan_of(CHAIN))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    sim.fail("a", "A")  # on_failure continue: B is called
    sim.engine.retry_cue("r1", "A")
    sim._drain()
    sim.take_sent()
    sim.ack_warning("b", "B")  # prepared while A runs again
    assert sim.cue("B").state is CueState.WARNING and not sim.take_sent(T.COORD_STANDBY)
    assert sim.cue("B").reason == "prepared: waiting for its predecessor to complete"
    sim.call_through("A", ["a"], attempt=2)
    assert sim.cue("B").state is CueState.STANDBY


DIRECT = """
cuelist: direct
cues:
  - {id: A, target_agents: [a], coordination: direct}
"""


def _critical(sim: Sim, cause: str) -> str:
    body = p.EscalationError(severity=Severity.CRITICAL, cause=cause, detail=cause)
    return sim.engine.escalate(None, None, T.ESCALATION_ERROR, body).id


def test_gos_stay_paused_while_another_critical_is_open() -> None:
    """Resolving one of two open critical escalations resumed every GO."""
    sim = Sim(plan_of(DIRECT))
    disk, net = _critical(sim, "disk"), _critical(sim, "net")
    sim.start()
    assert not sim.take_sent(T.TASK_ASSIGN)
    sim.engine.resolve(disk, None, "disk ok")
    sim._drain()
    assert not sim.take_sent(T.TASK_ASSIGN)
    assert not sim.take_sent(T.BROADCAST_RESUME)
    assert sim.engine.paused == f"critical escalation {net}"  # what still holds them
    sim.engine.resolve(net, None, "net ok")
    sim._drain()
    assert sim.engine.paused is None
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["A"]


def test_a_resume_by_the_operator_still_resumes_with_criticals_open() -> None:
    sim = Sim(plan_of(DIRECT))
    _critical(sim, "disk")
    _critical(sim, "net")
    sim.start()
    sim.engine.resume("operator")
    sim._drain()
    assert sim.engine.paused is None
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["A"]
