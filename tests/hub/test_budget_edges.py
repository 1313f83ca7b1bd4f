"""Budget edges on the pure engine: a debugger held back stays held while any limit is spent,
and a target's many counter names never hide one the budget limits."""

from __future__ import annotations

from protocols import payloads as p
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus
from tests.hub.sim import Sim, plan_of


def _debugged(budget: str, coordination: str = "direct") -> Sim:
    """One cue whose debugger is asked after its first failure, called: `a` then spends the
    budget's 10 tokens (and its 1.0 of cost, if it sets one)."""
    sim = Sim(
        plan_of(f"""
cuelist: debugged
budget: {budget}
cues:
  - id: A
    target_agents: [a]
    coordination: {coordination}
    on_repeated_failure: {{after: 1, debugger: doc}}
""")
    )
    sim.start()
    if coordination == "cued":
        sim.ack_warning("a", "A")
        sim.ack_standby("a", "A")
    assert sim.take_sent(T.COORD_GO if coordination == "cued" else T.TASK_ASSIGN)
    meta = {"usage": {"tokens": 10, "cost": 1.0 if "cost" in budget else 0.0}}
    sim.send("a", T.TASK_CONTEXT, p.TaskContext(key="k", value=1, metadata=meta), "r1", "A")
    return sim


def _assigned(sim: Sim) -> list[str]:
    return [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]


def test_gos_resumed_while_the_budget_is_spent_still_hold_the_debugger_back() -> None:
    sim = _debugged("{tokens: 10}")
    sim.engine.pause("critical escalation e1")
    sim.fail("a", "A", attempt=1)
    sim.engine.resume("resolved")
    sim._drain()
    assert _assigned(sim) == []
    assert sim.cue("A").state is CueState.WAITING and sim.cue("A").debugger is None
    assert sim.cue("A").reason == "GO paused: budget tokens spent 10 / 10"
    assert sim.run().hold_reason == "budget tokens spent 10 / 10"
    sim.engine.change_budget("r1", {"tokens": 100})  # found again by the raise
    sim._drain()
    assert _assigned(sim) == ["doc"]
    assert sim.cue("A").debugger == "doc" and sim.run().status is RunStatus.RUNNING


def test_raising_one_limit_leaves_the_debugger_held_while_another_is_spent() -> None:
    sim = _debugged("{tokens: 10, cost: 1.0}")
    sim.fail("a", "A", attempt=1)
    sim.engine.change_budget("r1", {"tokens": 100})
    sim._drain()
    assert _assigned(sim) == []
    assert sim.cue("A").debugger is None
    assert sim.cue("A").reason == "GO paused: budget cost spent 1 / 1"
    sim.engine.change_budget("r1", {"cost": 2.0})
    sim._drain()
    assert _assigned(sim) == ["doc"]


def test_a_cued_cue_held_for_its_debugger_is_not_warned_again_on_resume() -> None:
    """The resume that finds the debugger still held must not call the cue once more: that
    would retry the target the debugger was to be asked about."""
    sim = _debugged("{tokens: 10}", coordination="cued")
    sim.engine.pause("critical escalation e1")
    sim.fail("a", "A", attempt=1)
    sim.take_sent()
    sim.engine.resume("resolved")
    sim._drain()
    assert sim.take_sent(T.COORD_WARNING) == [] and _assigned(sim) == []
    assert sim.cue("A").attempt == 1 and sim.cue("A").state is CueState.WAITING
    sim.engine.change_budget("r1", {"tokens": 100})
    sim._drain()
    assert _assigned(sim) == ["doc"] and sim.take_sent(T.COORD_WARNING) == []


NOISY = """
cuelist: noisy
budget: {counters: {gpu_s: 10}}
cues:
  - {id: A, target_agents: [noisy, worker], coordination: direct}
  - {id: B, target_agents: [worker], coordination: direct, depends_on: [A]}
"""


def _done(sim: Sim, agent: str, cue: str, usage: p.Usage | None = None) -> None:
    sim.send(agent, T.STATUS_COMPLETED, p.StatusCompleted(usage=usage), "r1", cue)


def test_many_counter_names_from_one_target_never_hide_a_limited_one() -> None:
    sim = Sim(plan_of(NOISY))
    sim.start()
    junk = {"usage": {"counters": {f"junk{i}": 1 for i in range(p.COUNTERS_MAX)}}}
    sim.send("noisy", T.TASK_CONTEXT, p.TaskContext(key="k", value=1, metadata=junk), "r1", "A")
    _done(sim, "worker", "A", p.Usage(counters={"gpu_s": 1000}))
    _done(sim, "noisy", "A")
    run = sim.run()
    assert run.usage.counters["gpu_s"] == 1000 and sim.cue("A").usage is not None
    assert sim.cue("A").usage.counters["gpu_s"] == 1000
    assert len(run.usage.counters) == p.COUNTERS_MAX  # the cap still bounds the rest
    assert any("junk31" in e and "not kept" in e for e in run.record.errors)
    assert sim.cue("B").state is not CueState.GO
    assert (sim.cue("B").reason or "").startswith("GO paused: budget counters.gpu_s spent")
    assert "worker" not in [a for a, m in sim.take_sent(T.TASK_ASSIGN) if m.cue_id == "B"]


def test_a_limit_added_later_takes_a_slot_from_a_name_no_limit_names() -> None:
    sim = Sim(plan_of(NOISY))
    sim.start()
    sim.engine.change_budget("r1", {"counters": {"gpu_s": None}})
    junk = {"usage": {"counters": {f"junk{i}": 1 for i in range(p.COUNTERS_MAX)}}}
    sim.send("noisy", T.TASK_CONTEXT, p.TaskContext(key="k", value=1, metadata=junk), "r1", "A")
    assert len(sim.run().usage.counters) == p.COUNTERS_MAX
    sim.engine.change_budget("r1", {"counters": {"gpu_s": 10}})
    _done(sim, "worker", "A", p.Usage(counters={"gpu_s": 1000}))
    _done(sim, "noisy", "A")
    run = sim.run()
    assert run.usage.counters["gpu_s"] == 1000 and "junk31" not in run.usage.counters
    assert len(run.usage.counters) == p.COUNTERS_MAX
    assert any("junk31" in e for e in run.record.errors)
    assert (sim.cue("B").reason or "").startswith("GO paused: budget counters.gpu_s spent")


TWO_TARGETS = """
cuelist: two
budget: {tokens: 100000}
cues:
  - {id: A, target_agents: [a, b], retries: 1}
"""


def _completed_then_retried() -> tuple[Sim, p.StatusCompleted]:
    """a completes attempt 1 of A reporting 100 tokens, b fails it: a retry, so a's
    completion is late from now on. The completion, to send again."""
    sim = Sim(plan_of(TWO_TARGETS))
    sim.start()
    for agent in "ab":
        sim.ack_warning(agent, "A")
    for agent in "ab":
        sim.ack_standby(agent, "A")
    done = p.StatusCompleted(attempt=1, usage=p.Usage(tokens=100))
    sim.send("a", T.STATUS_COMPLETED, done, "r1", "A")
    sim.fail("b", "A", attempt=1)
    return sim, done


def test_a_copy_of_a_completion_counts_once_after_many_context_reports() -> None:
    """Completions and context writes shared one window of 32 ids: 32 context reports
    pushed a completion out, and a copy of it read later counted its usage again (found
    by review: 132 tokens, then 232)."""
    sim, done = _completed_then_retried()
    for i in range(32):
        wrote = p.TaskContext(key=f"k{i}", value=i, metadata={"usage": {"tokens": 1}})
        sim.send("a", T.TASK_CONTEXT, wrote, "r1", "A")
    before = sim.run().usage.tokens
    assert before == 132
    sim.send("a", T.STATUS_COMPLETED, done, "r1", "A")  # a copy, read again
    assert sim.run().usage.tokens == before


HELD_THEN_NOT_READY = """
cuelist: held
budget: {tokens: 10}
cues:
  - {id: A, target_agents: [a], auto_follow: B}
  - {id: B, target_agents: [b], standby_timeout_s: 30}
"""


def test_a_held_go_whose_target_then_says_not_ready_is_found_again_after_a_raise() -> None:
    """A GO held by a spent budget, then its ready target says not ready: the reason no
    longer said 'held', so the raise did not find it, and the hold had cleared its STANDBY
    deadline: the cue stayed in STANDBY for ever (found by review)."""
    sim = Sim(plan_of(HELD_THEN_NOT_READY))
    sim.start()
    sim.ack_warning("a", "A")
    sim.ack_standby("a", "A")
    done = p.StatusCompleted(attempt=1, usage=p.Usage(tokens=10))
    sim.send("a", T.STATUS_COMPLETED, done, "r1", "A")  # the budget is spent
    sim.ack_warning("b", "B")
    sim.ack_standby("b", "B")  # ready: its GO is held
    assert sim.run().status is RunStatus.HOLDING
    sim.ack_standby("b", "B", ready=False, reason="disk full")
    assert sim.run().status is RunStatus.HOLDING  # still held, and says so
    sim.engine.change_budget("r1", {"tokens": 100})
    sim._drain()
    cue = sim.cue("B")
    assert cue.state is CueState.STANDBY and "disk full" in (cue.reason or "")
    assert cue.deadline is not None  # its STANDBY deadline runs again
    sim.advance(30.01)
    assert sim.cue("B").state is not CueState.STANDBY  # the deadline did its work


def test_a_completion_counted_by_a_hub_before_is_not_counted_again() -> None:
    """A hub before `completions` kept a completion's id with the context writes'
    (`usage_ids`): a copy read by a new leader after an upgrade counts once."""
    sim, done = _completed_then_retried()
    cue = sim.cue("A")
    cue.usage_ids, cue.completions = [*cue.usage_ids, *cue.completions], []  # as stored then
    sim.send("a", T.STATUS_COMPLETED, done, "r1", "A")
    assert sim.run().usage.tokens == 100
