"""Run budgets in the pure engine: usage totals, the one warning, GOs held at the limit,
the run holding, and going on when the operator raises the budget (SPEC 5, Budgets)."""

from __future__ import annotations

from typing import Any

import pytest

from hub.engine import inputs
from hub.metrics import Metrics
from protocols import payloads as p
from protocols.codec import make
from protocols.errors import Conflict
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus, Severity
from tests.hub.sim import Sim, plan_of

CHAIN = """
cuelist: chain
budget: {tokens: 100, cost: 1.0}
cues:
  - {id: A, target_agents: [a], auto_follow: B}
  - {id: B, target_agents: [b], auto_follow: C}
  - {id: C, target_agents: [a]}
"""


TWO = """
cuelist: two
cues:
  - {id: A, target_agents: [a], auto_follow: B}
  - {id: B, target_agents: [b]}
"""


def _done(sim: Sim, agent: str, cue: str, run_id: str = "r1", **usage: Any) -> None:
    body = p.StatusCompleted(attempt=sim.cue(cue, run_id).attempt, usage=p.Usage(**usage))
    sim.send(agent, T.STATUS_COMPLETED, body, run_id, cue)


def _call(sim: Sim, cue: str, agent: str, run_id: str = "r1", **usage: Any) -> None:
    """WARNING, STANDBY and GO of `cue`, completed reporting `usage`."""
    attempt = sim.cue(cue, run_id).attempt
    sim.ack_warning(agent, cue, attempt, run_id)
    sim.ack_standby(agent, cue, attempt, run_id=run_id)
    _done(sim, agent, cue, run_id, **usage)


def _budget_escalations(sim: Sim) -> list[str]:
    return sorted(e.cause for e in sim.engine.escalations.by_id.values() if "budget" in e.cause)


def test_usage_is_totalled_per_cue_and_run_and_a_spent_budget_holds_the_next_go() -> None:
    sim = Sim(plan_of(CHAIN))
    sim.start()
    _call(sim, "A", "a", tokens=60, cost=0.25)
    assert sim.run().usage == p.Usage(tokens=60, cost=0.25)
    assert _budget_escalations(sim) == []  # 60 of 100: under warn_at (0.8)
    _call(sim, "B", "b", tokens=52, cost=0.5)
    run = sim.run()
    assert run.usage == p.Usage(tokens=112, cost=0.75)
    assert sim.cue("A").usage == p.Usage(tokens=60, cost=0.25)
    assert sim.cue("B").usage == p.Usage(tokens=52, cost=0.5)
    esc = [e for e in sim.engine.escalations.by_id.values() if "budget" in e.cause]
    assert [(e.cause, e.severity, e.run_id) for e in esc] == [
        ("budget:tokens@100", Severity.MEDIUM, "r1")
    ]  # cost: 0.75 of 1 is under 0.8
    # C is called (WARNING, STANDBY) but its GO is held back
    sim.ack_warning("a", "C")
    sim.take_sent()
    sim.ack_standby("a", "C")
    assert not sim.take_sent(T.COORD_GO)
    assert sim.cue("C").state is CueState.STANDBY
    assert sim.cue("C").reason == "GO paused: budget tokens spent 112 / 100"
    assert sim.run().status is RunStatus.HOLDING
    assert sim.run().hold_reason == "budget tokens spent 112 / 100"
    # the operator raises the budget: the held GO goes, the run runs on (as the reply says)
    answered = sim.engine.change_budget("r1", {"tokens": 500})
    assert answered.status is RunStatus.RUNNING and answered.hold_reason is None
    sim._drain()
    assert [m.cue_id for _, m in sim.take_sent(T.COORD_GO)] == ["C"]
    assert sim.run().status is RunStatus.RUNNING and sim.run().hold_reason is None
    raised = sim.run().budget
    assert raised is not None and raised.tokens == 500
    _done(sim, "a", "C", tokens=7)
    assert sim.run().status is RunStatus.SUCCESS
    assert sim.run().usage == p.Usage(tokens=119, cost=0.75)
    assert [e["type"] for e in sim.events_of("usage")] == ["usage"] * 3
    assert [e["budget"]["tokens"] for e in sim.events_of("budget")] == [500]


PARALLEL = """
cuelist: parallel
start: [A, B]
budget: {tokens: 10}
cues:
  - {id: A, target_agents: [a]}
  - {id: B, target_agents: [b]}
  - {id: C, target_agents: [c], depends_on: [A, B]}
"""


def test_totals_stop_at_their_caps_so_no_report_can_break_a_step() -> None:
    """The most a report may hold, cue after cue: each total stops at its cap and the run
    goes on (two costs of 1e308 once summed past float's range mid-step; a step that
    raises ends the term, and the next handled the same report again: the hub stalled).
    The metrics take such a report too (an int past a float's range once broke them)."""
    sim = Sim(plan_of(TWO))
    sim.start()
    most = {"tokens": p.USAGE_MAX, "cost": p.COST_MAX, "counters": {"calls": p.USAGE_MAX}}
    _call(sim, "A", "a", **most)
    _call(sim, "B", "b", **most)
    run = sim.run()
    assert run.usage == p.Usage(**most)
    assert sim.cue("B").usage == p.Usage(**most)
    assert run.status is RunStatus.SUCCESS
    metrics = Metrics()
    metrics.usage({"agent": "a", **most})
    metrics.usage({"agent": "a", **most})
    assert metrics.usage_tokens.labels("a")._value.get() == 2.0 * p.USAGE_MAX


def test_a_held_go_waits_for_the_operator_past_its_standby_deadline() -> None:
    sim = Sim(plan_of(CHAIN))
    sim.start()
    _call(sim, "A", "a", tokens=100)
    sim.ack_warning("b", "B")
    sim.ack_standby("b", "B")
    assert sim.run().hold_reason == "budget tokens spent 100 / 100"
    sim.advance(3600)  # past B's standby_timeout_s (60): no timeout, nothing fails
    assert sim.cue("B").state is CueState.STANDBY and sim.cue("B").attempt == 1
    assert sim.run().status is RunStatus.HOLDING
    assert not [e for e in sim.engine.escalations.by_id.values() if "timeout" in e.cause]
    sim.engine.change_budget("r1", {"tokens": 1000})
    sim._drain()
    assert sim.cue("B").state is CueState.GO and sim.cue("B").deadline is not None


def test_cues_already_gone_run_on_and_only_new_gos_wait() -> None:
    sim = Sim(plan_of(PARALLEL))
    sim.start()
    for cue, agent in (("A", "a"), ("B", "b")):
        sim.ack_warning(agent, cue)
        sim.ack_standby(agent, cue)
    assert sorted(m.cue_id or "" for _, m in sim.take_sent(T.COORD_GO)) == ["A", "B"]
    _done(sim, "a", "A", tokens=30)  # over the budget; B was GO'd already
    assert sim.run().status is RunStatus.RUNNING  # B runs on: not the operator's yet
    _done(sim, "b", "B", tokens=5)
    assert sim.cue("B").state is CueState.COMPLETED
    sim.ack_warning("c", "C")
    sim.ack_standby("c", "C")
    assert not sim.take_sent(T.COORD_GO)
    assert sim.run().hold_reason == "budget tokens spent 35 / 10"
    sim.engine.cancel("r1")
    sim._drain()
    with pytest.raises(Conflict, match="already cancelled"):
        sim.engine.change_budget("r1", {"tokens": 100})


def test_the_warning_is_raised_once_per_limit_and_again_for_a_raised_limit() -> None:
    text = CHAIN.replace("budget: {tokens: 100, cost: 1.0}", "budget: {tokens: 100, warn_at: 0.5}")
    sim = Sim(plan_of(text))
    sim.start()
    _call(sim, "A", "a", tokens=55)
    _call(sim, "B", "b", tokens=10)
    assert _budget_escalations(sim) == ["budget:tokens@100"]
    esc = next(e for e in sim.engine.escalations.by_id.values() if "budget" in e.cause)
    assert esc.count == 1 and esc.detail == "budget tokens at 55%: 55 / 100"
    sim.engine.change_budget("r1", {"tokens": 120})
    sim._drain()
    assert _budget_escalations(sim) == ["budget:tokens@100", "budget:tokens@120"]
    assert sim.run().budget_warned == ["tokens@100", "tokens@120"]


MESSAGES = """
cuelist: messages
budget: {messages: 6, counters: {api_calls: 3}}
cues:
  - {id: A, target_agents: [a], auto_follow: B}
  - {id: B, target_agents: [a]}
"""


def test_messages_count_what_the_hub_sent_and_took_for_the_run() -> None:
    sim = Sim(plan_of(MESSAGES))
    sim.start()
    _call(sim, "A", "a")  # 3 sent (WARNING, STANDBY, GO) + 3 taken (2 acks, completion)
    run = sim.run()
    assert (run.record.messages_out, run.record.messages_in) == (4, 3)  # + B's early WARNING
    sim.take_sent()
    sim.ack_warning("a", "B")
    sim.ack_standby("a", "B")
    assert not sim.take_sent(T.COORD_GO)
    assert sim.run().hold_reason == "budget messages spent 10 / 6"
    sim.engine.change_budget("r1", {"messages": None})  # null removes the limit
    sim._drain()
    assert [m.cue_id for _, m in sim.take_sent(T.COORD_GO)] == ["B"]


def test_a_copy_read_again_after_a_restart_counts_once_against_messages() -> None:
    """A's target answers WARNING, STANDBY and GO; each XADD is sent again (its reply was
    lost) and read by a leader that never saw the first (the router skips a copy only
    within one term). Each copy once counted again: 13 messages, and B's GO was held at 11.
    A copy counts once; another message alike (an id of its own) counts."""
    sim = Sim(plan_of(MESSAGES.replace("messages: 6", "messages: 11")))
    sim.start()
    bodies = [
        (T.ACK_WARNING, p.AckWarning(attempt=1)),
        (T.ACK_STANDBY, p.AckStandby(attempt=1, ready=True)),
        (T.STATUS_COMPLETED, p.StatusCompleted(attempt=1)),
    ]
    for mt, body in bodies:
        reply = make(mt, body, from_agent="a", run_id="r1", cue_id="A")
        inputs.handle(sim.engine, reply)
        sim._drain()
        sim.restart()  # a new leader, resumed from what the store holds
        inputs.handle(sim.engine, reply)  # the same message, read again
        sim._drain()
    assert sim.cue("A").state is CueState.COMPLETED
    assert sim.run().record.messages_in == 3
    sim.ack_warning("a", "B")
    sim.ack_standby("a", "B")
    assert [m.cue_id for _, m in sim.take_sent(T.COORD_GO)] == ["A", "B"]  # 10 of 11
    assert sim.run().messages() == 11
    sim.ack_warning("a", "A")  # late, but a message of its own: it counts
    assert sim.run().record.messages_in == 6


def test_named_counters_and_context_metadata_usage_count_too() -> None:
    sim = Sim(plan_of(MESSAGES.replace("messages: 6, ", "")))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    meta = {"usage": {"tokens": 4, "counters": {"api_calls": 2}}}
    sim.send("a", T.TASK_CONTEXT, p.TaskContext(key="k", value=1, metadata=meta), "r1", "A")
    bad = {"usage": {"tokens": -1}}
    sim.send("a", T.TASK_CONTEXT, p.TaskContext(key="k2", value=1, metadata=bad), "r1", "A")
    assert sim.run().record.protocol_violations == 1
    assert "metadata.usage.tokens" in sim.run().record.errors[0]
    _done(sim, "a", "A", counters={"api_calls": 1, "other": 9})
    assert sim.run().usage == p.Usage(tokens=4, counters={"api_calls": 3, "other": 9})
    assert sim.cue("A").usage == sim.run().usage
    sim.ack_warning("a", "B")
    sim.ack_standby("a", "B")
    assert sim.run().hold_reason == "budget counters.api_calls spent 3 / 3"
    sim.engine.change_budget("r1", {"counters": {"api_calls": 10}})
    sim._drain()
    assert sim.cue("B").state is CueState.GO


def test_wall_s_is_measured_from_the_run_start_by_timers() -> None:
    slow = "budget: {wall_s: 60}\ndefaults: {ack_timeout_s: 500, standby_timeout_s: 500}"
    text = CHAIN.replace("budget: {tokens: 100, cost: 1.0}", slow)
    sim = Sim(plan_of(text))
    sim.start()
    sim.advance(50)  # 80% of 60 s: warned
    assert _budget_escalations(sim) == ["budget:wall_s@60"]
    _call(sim, "A", "a")
    sim.advance(11)
    assert _budget_escalations(sim) == ["budget:wall_s@60"]  # once per limit
    sim.ack_warning("b", "B")
    sim.ack_standby("b", "B")
    assert sim.run().hold_reason == "budget wall_s spent 61 / 60"
    sim.engine.change_budget("r1", {"wall_s": 3600})
    sim._drain()
    assert sim.cue("B").state is CueState.GO


def test_a_run_budget_merges_over_the_cuelists_and_totals_survive_a_restart() -> None:
    sim = Sim(plan_of(CHAIN))
    sim.engine.start_run(sim.plans[0], "r1", {}, dry=False, budget={"cost": 9.5})
    sim._drain()
    budget = sim.run().budget
    assert budget is not None and (budget.tokens, budget.cost) == (100, 9.5)
    _call(sim, "A", "a", tokens=90, cost=1)
    warned = list(sim.run().budget_warned)
    sim.restart()
    run = sim.run()
    assert run.usage == p.Usage(tokens=90, cost=1.0) and run.budget_warned == warned
    assert sim.cue("A").usage == p.Usage(tokens=90, cost=1.0)
    _call(sim, "B", "b", tokens=20)
    sim.ack_warning("a", "C")
    sim.ack_standby("a", "C")
    assert sim.run().hold_reason == "budget tokens spent 110 / 100"


def test_a_direct_cue_held_by_a_budget_is_assigned_once_it_is_raised() -> None:
    text = """
cuelist: direct
budget: {tokens: 0}
cues:
  - {id: A, target_agents: [a], coordination: direct}
"""
    sim = Sim(plan_of(text))
    sim.start()
    assert not sim.take_sent(T.TASK_ASSIGN)
    assert sim.run().hold_reason == "budget tokens spent 0 / 0"
    sim.engine.change_budget("r1", {"tokens": 5})
    sim._drain()
    assert [m.cue_id for _, m in sim.take_sent(T.TASK_ASSIGN)] == ["A"]
    assert sim.run().status is RunStatus.RUNNING


def test_a_direct_cues_retry_held_by_a_budget_is_assigned_once_it_is_raised() -> None:
    """A direct cue's first attempt spends the budget (a context write's usage) and fails:
    its retry's task.assign is held back in `go`, the cue still in GO. Raising the budget
    once went past it (only STANDBY, ARMED, PENDING and WAITING cues were let go): the run
    said `running` with nothing in a call and no deadline, for ever."""
    text = """
cuelist: direct
budget: {tokens: 10}
cues:
  - {id: A, target_agents: [a], coordination: direct, retries: 1}
"""
    sim = Sim(plan_of(text))
    sim.start()
    assert [m.payload.attempt for _, m in sim.take_sent(T.TASK_ASSIGN)] == [1]  # type: ignore[attr-defined]
    meta = {"usage": {"tokens": 10}}
    sim.send("a", T.TASK_CONTEXT, p.TaskContext(key="k", value=1, metadata=meta), "r1", "A")
    sim.fail("a", "A", attempt=1)
    assert not sim.take_sent(T.TASK_ASSIGN)
    assert sim.run().hold_reason == "budget tokens spent 10 / 10"
    sim.engine.change_budget("r1", {"tokens": 100})
    sim._drain()
    assert [m.payload.attempt for _, m in sim.take_sent(T.TASK_ASSIGN)] == [2]  # type: ignore[attr-defined]
    assert sim.cue("A").attempt == 2 and sim.cue("A").deadline is not None
    assert sim.run().status is RunStatus.RUNNING
    sim.engine.change_budget("r1", {"tokens": 200})  # raised again: nothing goes twice
    sim._drain()
    assert not sim.take_sent(T.TASK_ASSIGN)
    sim.complete("a", "A", attempt=2)
    assert sim.run().status is RunStatus.SUCCESS
    assert [g["attempt"] for g in sim.cue("A").gos] == [1, 2]


def test_a_context_writes_usage_read_again_after_a_restart_counts_once() -> None:
    """A target's context write reporting 4 tokens is sent again (its XADD's reply was
    lost) and read by a leader that never saw it (the router skips a copy only within one
    term): it once counted again, every time. A context write's usage counts once."""
    sim = Sim(plan_of(MESSAGES.replace("messages: 6, ", "")))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    meta = {"usage": {"tokens": 4, "counters": {"api_calls": 1}}}
    body = p.TaskContext(key="k", value=1, metadata=meta)
    write = make(T.TASK_CONTEXT, body, from_agent="a", run_id="r1", cue_id="A")
    inputs.handle(sim.engine, write)
    sim._drain()
    sim.restart()  # a new leader, resumed from what the store holds
    inputs.handle(sim.engine, write)  # the same message, read again
    sim._drain()
    assert sim.run().usage == p.Usage(tokens=4, counters={"api_calls": 1})
    assert sim.cue("A").usage == sim.run().usage
    assert [e["tokens"] for e in sim.events_of("usage")] == [4]
    again = make(T.TASK_CONTEXT, body, from_agent="a", run_id="r1", cue_id="A")
    inputs.handle(sim.engine, again)  # another write (a message of its own) counts
    sim._drain()
    assert sim.run().usage == p.Usage(tokens=8, counters={"api_calls": 2})


def test_a_retry_its_debugger_chose_for_an_operators_go_goes_when_the_budget_is_raised() -> None:
    """An operator GOs a manual direct cue; it fails, its debugger says retry and reports
    spending the rest of the budget, so the retry's task.assign is held, the cue waiting.
    Raising the budget once re-evaluated it instead: a manual cue, it went back to `armed`,
    and the operator had to GO it a second time."""
    text = """
cuelist: manual
budget: {tokens: 10}
cues:
  - id: A
    target_agents: [a]
    coordination: direct
    manual: true
    on_repeated_failure: {after: 1, debugger: doc}
"""
    sim = Sim(plan_of(text))
    sim.start()
    sim.engine.operator_go("r1", "A")
    sim._drain()
    sim.fail("a", "A", attempt=1)
    diagnosis = {"decision": "retry", "diagnosis": "flaky"}
    body = p.StatusCompleted(attempt=1, result=diagnosis, usage=p.Usage(tokens=10))
    sim.send("doc", T.STATUS_COMPLETED, body, "r1", "A")
    sim.take_sent()
    assert sim.run().hold_reason == "budget tokens spent 10 / 10"
    sim.engine.change_budget("r1", {"tokens": 100})
    sim._drain()
    assert [(a, m.payload.attempt) for a, m in sim.take_sent(T.TASK_ASSIGN)] == [("a", 2)]  # type: ignore[attr-defined]
    assert sim.cue("A").state is CueState.GO and sim.run().status is RunStatus.RUNNING
