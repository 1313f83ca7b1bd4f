"""Edges of the run semantics a review found: direct cues an operator calls while their
resource is held, flags only a cue's own successors raise, `on_failure: continue` with
`auto_follow`, arbitration across a leader change, what a dry run assumes, early reasons."""

from __future__ import annotations

import pytest

from hub.engine.dry import dry_run
from protocols.messages import MessageType as T
from protocols.states import CueState, FiredBy, RunStatus
from protocols.validation import validate_text
from tests.hub.sim import KEYS, Sim, plan_of
from tests.hub.test_conflicts_runtime import _two_runs

# -- a direct cue called by an operator while its resource is held ----------------------
MANUAL_DIRECT = """
cuelist: manual-direct
conflict_strategy: fcfs
start: [HOLD, DEPLOY]
cues:
  - {id: HOLD, target_agents: [a], resources: [runner]}
  - {id: DEPLOY, target_agents: [b], resources: [runner], manual: true, coordination: direct}
"""
BUILD = """
cuelist: other
conflict_strategy: fcfs
cues:
  - {id: BUILD, target_agents: [c], resources: [runner]}
"""


def test_an_operator_go_of_a_direct_cue_is_assigned_once_its_resource_is_free() -> None:
    """The GO of an armed direct cue whose claim waited left it `armed`, queued for the
    resource; when the holder let go nothing called it (only waiting cues are called
    again), and its queued claim kept the free resource from every other run."""
    sim = Sim(plan_of(MANUAL_DIRECT), plan_of(BUILD))
    sim.start()
    sim.ack_warning("a", "HOLD")  # HOLD claims the runner at STANDBY
    sim.engine.operator_go("r1", "DEPLOY")
    sim._drain()
    assert not sim.take_sent(T.TASK_ASSIGN)
    deploy = sim.cue("DEPLOY")
    assert deploy.state is CueState.WAITING and "runner" in (deploy.reason or "")
    assert sim.run().status is RunStatus.RUNNING  # HOLD will let go: no operator needed
    sim.ack_standby("a", "HOLD")
    sim.complete("a", "HOLD")
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["b"]
    assert [g["fired_by"] for g in sim.cue("DEPLOY").gos] == [FiredBy.OPERATOR.value]
    sim.complete("b", "DEPLOY")
    assert sim.run().status is RunStatus.SUCCESS
    sim.start("r2", sim.plans[1])  # the runner is free for another run
    sim.ack_warning("c", "BUILD", run_id="r2")
    assert sim.cue("BUILD", "r2").state is CueState.STANDBY


DIRECT = """
cuelist: direct
cues:
  - {id: D, target_agents: [a], resources: [runner], coordination: direct}
  - {id: NEXT, target_agents: [a], depends_on: [D]}
"""
HOLDER = """
cuelist: holder
cues:
  - {id: H, target_agents: [h], resources: [runner]}
"""


def test_an_operators_retry_of_a_direct_cue_is_assigned_once_its_resource_is_free() -> None:
    """A retry of a failed direct cue whose resource another run held kept the cue
    `failed` with its claim queued: freed, the resource went to no one."""
    direct, holder = plan_of(DIRECT), plan_of(HOLDER)
    sim = Sim(direct, holder)
    sim.start("r1", direct)
    assert sim.take_sent(T.TASK_ASSIGN)
    sim.fail("a", "D", run_id="r1")
    assert sim.run("r1").status is RunStatus.FAILED
    sim.start("r2", holder)
    sim.ack_warning("h", "H", run_id="r2")  # H holds the runner
    sim.engine.retry_cue("r1", "D")
    sim._drain()
    assert sim.cue("D", "r1").state is CueState.WAITING
    assert sim.run("r1").status is RunStatus.RUNNING
    sim.ack_standby("h", "H", run_id="r2")
    sim.complete("h", "H", run_id="r2")
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["a"]
    sim.complete("a", "D", attempt=2, run_id="r1")
    assert sim.cue("D", "r1").state is CueState.COMPLETED
    assert sim.cue("NEXT", "r1").state is CueState.WARNING  # unblocked, and called


# -- a flag only the waiting cue itself, or a cue after it, raises ----------------------
DOWNSTREAM = """
cuelist: chicken-and-egg
cues:
  - {id: A, target_agents: [a]}
  - {id: B, target_agents: [b], depends_on: [A], conditions: [checked]}
  - {id: C, target_agents: [c], depends_on: [B], raises: [checked]}
"""
ITSELF = """
cuelist: self-raised
cues:
  - {id: A, target_agents: [a]}
  - {id: B, target_agents: [b], depends_on: [A], conditions: [checked], raises: [checked]}
"""


@pytest.mark.parametrize("text", [DOWNSTREAM, ITSELF], ids=["downstream", "itself"])
def test_a_flag_only_the_cue_or_its_successors_raise_is_the_operators_to_give(text: str) -> None:
    """The flag counted as raisable because an unfinished cue raises it, though that cue
    waits for the one that needs it: the run stayed `running` for ever, no hold_reason."""
    sim = Sim(plan_of(text))
    sim.start()
    sim.call_through("A", ["a"])
    assert sim.cue("B").state is CueState.WAITING
    run = sim.run()
    assert (run.status, run.hold_reason) == (RunStatus.HOLDING, "condition checked")
    sim.engine.raise_condition("r1", "checked")
    sim._drain()
    assert sim.cue("B").state is CueState.WARNING
    assert sim.run().status is RunStatus.RUNNING


@pytest.mark.parametrize(
    ("text", "by"), [(DOWNSTREAM, "only by C,"), (ITSELF, "only by B itself,")],
    ids=["downstream", "itself"],
)  # fmt: skip
def test_validation_warns_of_a_flag_only_the_cue_or_its_successors_raise(
    text: str, by: str
) -> None:
    """Such a cuelist validated without a word."""
    report = validate_text(text, "x.yaml")
    assert report.valid
    [issue] = report.warnings
    assert (issue.code, issue.file, issue.line, issue.cue, issue.key) == (
        "condition_raised_downstream", "x.yaml", 5, "B", "conditions"
    )  # fmt: skip
    assert by in issue.message


def test_a_dry_run_assumes_the_flag_a_real_run_holds_for() -> None:
    """(A guard, not a reproduction: the dry run already raised it.) What the dry run
    assumes is what the real run above holds for, not something it hides."""
    run, _ = dry_run(plan_of(DOWNSTREAM), "d1", {}, KEYS)
    assert run.status is RunStatus.DRY
    assert run.record.waits == ["B: needs conditions checked (assumed raised)"]


# -- `on_failure: continue` and `auto_follow` --------------------------------------------
FAIL_FORWARD = """
cuelist: fail-forward
cues:
  - {{id: A, target_agents: [a], on_failure: continue, auto_follow: B}}
  - {{id: B, target_agents: [b], warn_ahead: {ahead}}}
"""


@pytest.mark.parametrize("ahead", [0, 1])
def test_a_predecessor_failed_under_continue_lets_its_auto_follow_go(ahead: int) -> None:
    """With `warn_ahead: 0` the follower stayed armed once A failed; warned early (1) it
    was GO'd by auto-follow: whether it ran hung on when it was warned. `continue` lets
    dependents run (SPEC 5), so a failed-under-continue predecessor fires its auto-follow."""
    sim = Sim(plan_of(FAIL_FORWARD.format(ahead=ahead)))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    sim.fail("a", "A")
    assert sim.cue("A").state is CueState.FAILED
    assert sim.cue("B").state is CueState.WARNING
    sim.ack_warning("b", "B")
    sim.ack_standby("b", "B")
    assert [g["fired_by"] for g in sim.cue("B").gos] == [FiredBy.AUTO_FOLLOW.value]
    sim.complete("b", "B")
    assert sim.run().status is RunStatus.PARTIAL


# -- arbitration across a leader change ---------------------------------------------------
def test_arbitration_falls_back_to_priority_after_a_leader_change() -> None:
    """The fallback timer lived only in the leader's memory: a new leader re-created the
    phase and debugger timers of the runs it adopted, not this one, so the conflict never
    fell back to priority."""
    sim = _two_runs("arbitration")
    sim.ack_warning("b", "HIGH", run_id="r2")  # HIGH waits: an escalation.conflict is open
    assert sim.cue("HIGH", "r2").state is CueState.WARNING
    sim.take_over()
    sim.advance(5)
    assert sim.cue("HIGH", "r2").state is CueState.WARNING  # not before its 10 s
    sim.advance(6)  # past the 10 s timeout (LOW's STANDBY deadline is 60 s)
    assert sim.cue("HIGH", "r2").state is CueState.STANDBY
    assert sim.cue("LOW", "r1").state is CueState.WAITING  # stood down, not yet GO'd


# -- what a dry run assumes ---------------------------------------------------------------
GATED = """
cuelist: gated
start: [B]
cues:
  - {id: B, target_agents: [b], conditions: [approved]}
  - {id: M, target_agents: [m], manual: true, raises: [approved]}
"""


def test_a_dry_run_assumes_what_the_real_run_holds_for() -> None:
    """The dry run raised the first missing condition in declaration order (`approved`)
    though an armed cue raises it: it reported B firing before M, where a real run holds
    for the GO of M and fires B after it."""
    sim = Sim(plan_of(GATED))
    sim.start()
    assert sim.run().hold_reason == "GO for M"
    run, _ = dry_run(plan_of(GATED), "d1", {}, KEYS)
    order = sorted(run.cues, key=lambda c: run.cues[c].fired_seq or 0)
    assert order == ["M", "B"]
    assert run.record.waits == ["M: armed, needs an operator GO (assumed given)"]


# -- the reason of a cue warned early -----------------------------------------------------
CHAIN = """
cuelist: chain
cues:
  - {id: A, target_agents: [a], auto_follow: B}
  - {id: B, target_agents: [b]}
"""


def test_a_cue_warned_early_names_its_missing_ack_once_its_predecessor_is_done() -> None:
    """Its predecessor completed before any target acknowledged: the cue went on saying
    "early warning: preparing while a predecessor runs"."""
    sim = Sim(plan_of(CHAIN))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")  # A's GO warns B early
    assert sim.cue("B").early
    sim.complete("a", "A")
    b = sim.cue("B")
    assert (b.state, b.early) == (CueState.WARNING, False)
    assert b.reason == "waiting for ack.warning from b"
