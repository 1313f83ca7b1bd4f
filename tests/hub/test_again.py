"""Retry of a cue and rerun of a run, on the pure engine with a fake clock."""

from __future__ import annotations

import pytest

from hub.engine.budgets import BUDGET
from hub.engine.state import RunState
from hub.store.layout import read_run
from protocols import payloads as p
from protocols.errors import Conflict
from protocols.messages import MessageType as T
from protocols.states import CueState, FiredBy, RunStatus
from tests.hub.sim import Sim, plan_of

CHAIN = """
cuelist: chain
defaults: {retries: 1}
cues:
  - {id: BUILD, target_agents: [a]}
  - {id: TEST, target_agents: [b], depends_on: [BUILD]}
  - {id: SHIP, target_agents: [c], depends_on: [TEST]}
  - {id: DOCS, target_agents: [c]}
"""
START = "start: [BUILD, DOCS]\n"


def _fail_build(sim: Sim) -> None:
    for attempt in (1, 2):  # retries: 1, so two attempts fail
        sim.ack_warning("a", "BUILD", attempt)
        sim.ack_standby("a", "BUILD", attempt)
        sim.fail("a", "BUILD", attempt, error=f"broken {attempt}")


def _through(sim: Sim, cue: str, agent: str, run_id: str = "r1") -> None:
    """Answer the cue's current call (an early warning may have made it attempt 2)."""
    sim.call_through(cue, [agent], attempt=sim.cue(cue, run_id).attempt, run_id=run_id)


def _ended(sim: Sim, run_id: str = "r1") -> RunState:
    """The run as the store holds it, once the driver has forgotten it."""
    sim.engine.forget(run_id)
    run = read_run(sim.persisted[run_id])
    assert run is not None and run_id not in sim.engine.runs
    return run


def test_retry_a_failed_cue_of_a_live_run_and_its_dependents_go_on() -> None:
    sim = Sim(plan_of(CHAIN.replace("defaults", START + "defaults")))
    sim.start()
    _fail_build(sim)
    assert sim.cue("BUILD").state is CueState.FAILED and sim.cue("BUILD").retries_used == 1
    assert sim.cue("TEST").state is CueState.BLOCKED and sim.cue("SHIP").state is CueState.BLOCKED
    assert sim.run().status is RunStatus.RUNNING  # DOCS is still in its call
    cue, retried = sim.engine.retry_cue("r1", "BUILD")
    sim._drain()
    build = sim.cue("BUILD")
    assert (retried, cue.state, build.attempt, build.retries_used) == (
        "BUILD",
        CueState.WARNING,
        3,
        0,
    )
    assert build.fired_by is FiredBy.OPERATOR
    assert sim.cue("TEST").state is CueState.WAITING and not sim.cue("TEST").error
    assert sim.cue("SHIP").reason == "waiting for predecessors TEST"
    assert [e["cue"] for e in sim.events_of("retry")] == ["BUILD"]
    _through(sim, "BUILD", "a")
    assert sim.cue("BUILD").gos[-1] == {"attempt": 3, "fired_by": "operator", "at": sim.now}
    for cue, agent in (("TEST", "b"), ("SHIP", "c"), ("DOCS", "c")):
        _through(sim, cue, agent)
    assert sim.run().status is RunStatus.SUCCESS


def test_retry_of_a_blocked_cue_retries_the_failure_it_waits_on() -> None:
    sim = Sim(plan_of(CHAIN.replace("defaults", START + "defaults")))
    sim.start()
    _fail_build(sim)
    cue, retried = sim.engine.retry_cue("r1", "SHIP")
    sim._drain()
    assert retried == "BUILD" and cue.state is CueState.WAITING
    assert sim.cue("BUILD").state is CueState.WARNING


def test_retry_brings_a_failed_run_back_to_running() -> None:
    plan = plan_of(CHAIN.replace("  - {id: DOCS, target_agents: [c]}\n", ""))
    sim = Sim(plan)
    sim.start()
    _fail_build(sim)
    assert sim.run().status is RunStatus.FAILED
    ended = _ended(sim)
    _, retried = sim.engine.retry_cue("r1", "TEST", loaded=(ended, plan))
    sim._drain()
    run = sim.run()
    assert retried == "BUILD" and run.status is RunStatus.RUNNING and run.completed_at is None
    assert "r1" in sim.outs[-1].reopened  # the store keeps its keys again
    assert sim.events_of("run")[-1] == {
        "type": "run", "at": sim.now, "status": "running", "reason": "retry of BUILD"
    }  # fmt: skip
    for cue, agent in (("BUILD", "a"), ("TEST", "b"), ("SHIP", "c")):
        _through(sim, cue, agent)
    assert sim.run().status is RunStatus.SUCCESS
    sim.engine.forget("r1")  # ended again: forgotten again


def test_a_cue_blocked_by_two_failures_stays_blocked_by_the_other() -> None:
    diamond = """
cuelist: diamond
start: [X, Y]
cues:
  - {id: X, target_agents: [a]}
  - {id: Y, target_agents: [b]}
  - {id: Z, target_agents: [c], depends_on: [X, Y]}
"""
    sim = Sim(plan_of(diamond))
    sim.start()
    for cue, agent in (("X", "a"), ("Y", "b")):
        sim.ack_warning(agent, cue)
        sim.ack_standby(agent, cue)
        sim.fail(agent, cue)
    assert sim.cue("Z").error == "X"
    sim.engine.retry_cue("r1", "X", loaded=(_ended(sim), sim.plans[0]))
    sim._drain()
    assert sim.cue("Z").state is CueState.BLOCKED and sim.cue("Z").error == "Y"


def test_retry_refuses_what_it_cannot_try_again() -> None:
    sim = Sim(plan_of(CHAIN.replace("defaults", START + "defaults")))
    sim.start()
    with pytest.raises(Conflict, match="cue BUILD is not failed or blocked: it is warning: wait"):
        sim.engine.retry_cue("r1", "BUILD")
    sim.engine.cancel("r1")
    sim._drain()
    with pytest.raises(Conflict, match="run r1 is cancelled"):
        sim.engine.retry_cue("r1", "TEST")


HANDOFF = """
cuelist: handoff
specialists:
  coder: {provides: [implemented_code], handoff_to: [tester]}
  tester: {requires: [implemented_code]}
cues:
  - {id: CODE, target_agents: [coder], handoff: {to: tester}, raises: [coded], auto_follow: TEST}
  - {id: TEST, target_agents: [tester], conditions: [coded]}
"""


def _code_then_fail_test(sim: Sim) -> None:
    sim.ack_warning("coder", "CODE")
    sim.ack_standby("coder", "CODE")
    body = p.TaskHandoff(
        from_agent="coder", to_agent="tester", task_id="CODE",
        handoff_context=p.HandoffContext(implemented_code="src/x.py"),  # type: ignore[call-arg]
    )  # fmt: skip
    sim.send("coder", T.TASK_HANDOFF, body, cue_id="CODE")
    sim.send("coder", T.TASK_CONTEXT, p.TaskContext(key="build", value="b-1"), cue_id="CODE")
    sim.complete("coder", "CODE", lines=120)
    sim.ack_warning("tester", "TEST")
    sim.ack_standby("tester", "TEST")
    sim.fail("tester", "TEST", error="flaky")
    assert sim.run().status is RunStatus.PARTIAL


def test_rerun_from_failure_skips_what_completed_and_carries_what_it_left() -> None:
    plan = plan_of(HANDOFF)
    sim = Sim(plan)
    sim.start()
    _code_then_fail_test(sim)
    ended = _ended(sim)
    context = {"build": {"value": "b-1", "source": "coder", "timestamp": 1.0, "tags": [],
                         "metadata": {}, "cue_id": "CODE"}}  # fmt: skip
    run = sim.engine.rerun("r1", plan, "r2", from_failure=True, loaded=ended, context=context)
    sim._drain()
    assert run.rerun_of == "r1" and sim.run("r1").reruns == ["r2"]
    assert "r1" in sim.outs[-1].finished  # the source's link is written, then it is forgotten
    code = sim.cue("CODE", "r2")
    assert code.state is CueState.COMPLETED and code.result == {"coder": {"lines": 120}}
    assert code.reason == "completed in run r1"
    assert run.conditions == ["coded"] and run.context_owners == {"build": "coder"}
    assert ("r2", "build", context["build"]) in sim.outs[-1].context
    assert not [m for a, m in sim.take_sent(T.COORD_WARNING) if m.run_id == "r2" and a == "coder"]
    sim.ack_warning("tester", "TEST", run_id="r2")
    sim.ack_standby("tester", "TEST", run_id="r2")
    (go,) = [m for _, m in sim.take_sent(T.COORD_GO) if m.run_id == "r2"]
    assert go.payload.context["implemented_code"] == "src/x.py"  # type: ignore[attr-defined]
    sim.complete("tester", "TEST", run_id="r2")
    assert sim.run("r2").status is RunStatus.SUCCESS
    assert sim.run("r2").fired() == ["CODE", "TEST"]


def test_a_plain_rerun_starts_every_cue_afresh() -> None:
    plan = plan_of(HANDOFF)
    sim = Sim(plan)
    sim.start()
    _code_then_fail_test(sim)
    run = sim.engine.rerun("r1", plan, "r2")  # the source still in memory
    sim._drain()
    assert sim.cue("CODE", "r2").state is CueState.WARNING and not run.conditions
    assert sim.run("r1").reruns == ["r2"] and run.rerun_of == "r1"
    assert [e["run_id"] for e in sim.events_of("rerun")] == ["r2"]


def test_a_rerun_and_a_retry_of_an_ended_run_in_one_batch() -> None:
    """Commands are served concurrently: the rerun takes the ended source in for its link,
    and a retry of it before that write is done finds it whole and runs it again."""
    plan = plan_of(HANDOFF)
    sim = Sim(plan)
    sim.start()
    _code_then_fail_test(sim)
    ended = _ended(sim)
    sim.engine.rerun("r1", plan, "r2", loaded=ended)
    sim.engine.retry_cue("r1", "TEST")  # in memory now: no `loaded` given
    out = sim.engine.take()
    for run_id in out.finished:
        sim.engine.forget(run_id)  # as the driver does after the write
    assert sim.engine.runs["r1"].status is RunStatus.RUNNING  # kept: it runs again
    assert sim.engine.runs["r1"].cues["TEST"].state is CueState.WARNING


def test_a_run_retried_before_it_is_forgotten_sets_its_wall_s_timers_again() -> None:
    """The driver sweeps out the timers of a run that ended (its wall_s ones a week away)
    while the engine still holds it, its end not yet written; a retry then served runs it
    again. On the code before, with no wall_s timers: its time limit was checked only at
    its next GO, and a run waiting on an agent overran it."""
    walled = "cuelist: walled\nbudget: {wall_s: 600}\ndefaults: {retries: 1}\n"
    sim = Sim(plan_of(walled + "cues:\n  - {id: BUILD, target_agents: [a]}\n"))
    sim.start()
    walls = [t for t in sim.timers if t.kind == BUDGET]
    assert len(walls) == 2  # at warn_at, and at the end
    _fail_build(sim)
    assert sim.run().status is RunStatus.FAILED  # not forgotten: its end is being written
    sim.timers = [t for t in sim.timers if t.kind != BUDGET]  # the sweep
    sim.engine.retry_cue("r1", "BUILD")
    sim._drain()
    assert sorted(t.at for t in sim.timers if t.kind == BUDGET) == sorted(t.at for t in walls)
