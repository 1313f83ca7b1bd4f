"""A debugger after repeated failure, on the pure engine: asked once per failure streak,
its diagnosis written to the context, and its decision (retry, reassign, abandon) applied."""

from __future__ import annotations

from typing import Any

from protocols import payloads as p
from protocols.debugging import DEBUG_KEY, FailureHistory, diagnosis_key
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus
from protocols.targeting import Candidate
from tests.hub.sim import Sim, plan_of

LIST = """
cuelist: debugged
specialists:
  a: {provides: [build]}
  b: {provides: [build, lint]}
  c: {provides: [lint]}
cues:
  - id: BUILD
    target_agents: [a]
    coordination: direct
    action: {argv: [make], timeout_s: 10, image: base}
    on_repeated_failure: {after: 2, debugger: doc, allow: [timeout_s], timeout_s: 60}
  - {id: SHIP, target_agents: [c], coordination: direct, depends_on: [BUILD]}
"""


def _online(sim: Sim, agents: list[str]) -> None:
    """The registry says these agents are online (contracts from the cuelist's)."""
    sim.engine.directory = {a: Candidate(a) for a in agents}


def _sim() -> Sim:
    sim = Sim(plan_of(LIST))
    _online(sim, ["a", "b", "c", "doc"])
    sim.start()
    return sim


def _fail_twice(sim: Sim, agent: str = "a", first: int = 1) -> FailureHistory:
    """Fail two attempts in a row; returns the history the debugger was sent (once)."""
    sim.fail(agent, "BUILD", attempt=first, error="exit code 2: make: *** [all] Error 2")
    again = [(a, m.payload.attempt) for a, m in sim.take_sent(T.TASK_ASSIGN)]  # type: ignore[attr-defined]
    assert again[-1] == (agent, first + 1)  # attempt 2 went to the target: doc not yet asked
    sim.fail(agent, "BUILD", attempt=first + 1, error="exit code 2: make: *** [all] Error 2")
    asked = [(a, m) for a, m in sim.take_sent(T.TASK_ASSIGN) if a == "doc"]
    assert len(asked) == 1, asked
    return FailureHistory.model_validate(asked[0][1].payload.action[DEBUG_KEY])  # type: ignore[attr-defined]


def _diagnose(sim: Sim, attempt: int, **result: Any) -> None:
    sim.complete("doc", "BUILD", attempt=attempt, **result)


def test_two_failures_ask_the_debugger_once_and_reassign_sends_the_third_attempt_elsewhere() -> (
    None
):
    sim = _sim()
    history = _fail_twice(sim)
    assert [a.attempt for a in history.attempts] == [1, 2]
    assert history.attempts[0].targets == ["a"] and "Error 2" in history.attempts[0].error
    assert history.candidates == ["b"]  # online, provides build; c does not; doc is the debugger
    assert history.action["argv"] == ["make"] and history.allow == ["timeout_s"]
    cue = sim.cue("BUILD")
    assert cue.state is CueState.WAITING and "waiting for doc's diagnosis" in (cue.reason or "")
    _diagnose(sim, 2, decision="reassign", diagnosis="a's toolchain is broken", to="b")
    (assign,) = sim.take_sent(T.TASK_ASSIGN)
    assert assign[0] == "b" and assign[1].payload.attempt == 3  # type: ignore[attr-defined]
    assert sim.cue("BUILD").assigned == ["b"]
    sim.complete("b", "BUILD", attempt=3)
    assert sim.cue("BUILD").state is CueState.COMPLETED
    entries = [e for out in sim.outs for r, k, e in out.context if k == diagnosis_key("BUILD")]
    assert len(entries) == 1 and entries[0]["source"] == "doc"
    assert entries[0]["value"]["decision"] == "reassign" and "diagnosis" in entries[0]["tags"]
    assert sim.run().context_owners[diagnosis_key("BUILD")] == "doc"
    (decision,) = sim.cue("BUILD").decisions
    assert decision["decision"] == "reassign" and decision["to"] == "b"
    assert [e["decision"] for e in sim.events_of("decision")] == ["reassign"]
    sim.complete("c", "SHIP")
    assert sim.run().status is RunStatus.SUCCESS


def test_each_failure_streak_asks_once_and_a_retry_changes_only_allowed_keys() -> None:
    sim = _sim()
    _fail_twice(sim)
    _diagnose(sim, 2, decision="retry", diagnosis="flaky: give it longer",
              action={"timeout_s": 60, "argv": ["rm", "-rf", "/"]})  # fmt: skip
    (assign,) = sim.take_sent(T.TASK_ASSIGN)
    action = assign[1].payload.action  # type: ignore[attr-defined]
    assert assign[0] == "a" and action["timeout_s"] == 60 and action["argv"] == ["make"]
    (decision,) = sim.cue("BUILD").decisions
    assert decision["changed"] == ["timeout_s"] and decision["refused"] == ["argv"]
    history = _fail_twice(sim, first=3)  # a second streak: asked once more, no more
    assert history.consult == 2 and [a.attempt for a in history.attempts] == [3, 4]
    assert history.action["timeout_s"] == 60


def test_abandon_fails_the_cue_with_the_diagnosis_and_blocks_what_follows() -> None:
    sim = _sim()
    _fail_twice(sim)
    _diagnose(sim, 2, decision="abandon", diagnosis="the Makefile has a syntax error")
    cue = sim.cue("BUILD")
    assert cue.state is CueState.FAILED
    assert cue.error == "abandoned on doc's diagnosis: the Makefile has a syntax error"
    assert sim.cue("SHIP").state is CueState.BLOCKED
    assert sim.run().status is RunStatus.FAILED


def test_no_diagnosis_in_time_fails_the_cue_and_a_late_one_is_only_counted() -> None:
    sim = _sim()
    _fail_twice(sim)
    sim.advance(60.01)
    cue = sim.cue("BUILD")
    assert cue.state is CueState.FAILED
    assert "its debugger doc gave no diagnosis within 60s" in (cue.error or "")
    assert sim.run().record.late_replies == 0


def test_a_result_that_is_not_a_diagnosis_fails_the_cue_saying_why() -> None:
    sim = _sim()
    _fail_twice(sim)
    _diagnose(sim, 2, decision="pray", diagnosis="?")
    assert sim.cue("BUILD").state is CueState.FAILED
    assert "doc answered no diagnosis (decision:" in (sim.cue("BUILD").error or "")


def test_a_reassign_to_an_agent_without_the_capability_is_refused() -> None:
    sim = _sim()
    _fail_twice(sim)
    _diagnose(sim, 2, decision="reassign", diagnosis="try c", to="c")
    cue = sim.cue("BUILD")
    assert cue.state is CueState.FAILED and "only online agents providing the same" in (
        cue.error or ""
    )
    assert cue.assigned is None and not sim.take_sent(T.TASK_ASSIGN)


def test_only_the_debugger_may_diagnose_and_only_while_asked() -> None:
    sim = _sim()
    sim.complete("doc", "BUILD", attempt=1, decision="abandon", diagnosis="early")  # not asked
    assert sim.run().record.late_replies == 1 and sim.cue("BUILD").state is CueState.GO
    _fail_twice(sim)
    sim.complete("c", "BUILD", attempt=2, decision="abandon", diagnosis="hostile")
    assert sim.run().record.protocol_violations == 1  # c is no target and no debugger
    assert sim.cue("BUILD").state is CueState.WAITING and sim.cue("BUILD").debugger == "doc"


HANDED_OFF = LIST.replace(
    "    on_repeated_failure:", "    handoff: {to: c}\n    on_repeated_failure:"
).replace("a: {provides: [build]}", "a: {provides: [build], handoff_to: [c]}")


def test_a_cues_handoff_is_its_targets_to_send_not_its_debuggers() -> None:
    """The debugger counts as the cue's for its diagnosis; a handoff it sent (before
    anything failed) was taken as the cue's, and its target's own then dropped unseen."""
    sim = Sim(plan_of(HANDED_OFF))
    _online(sim, ["a", "b", "c", "doc"])
    sim.start()
    sim.take_sent()

    def handoff(sender: str, artifact: str) -> None:
        context = p.HandoffContext(artifact=artifact)
        body = p.TaskHandoff(from_agent=sender, to_agent="c", task_id="BUILD",
                             handoff_context=context)  # fmt: skip
        sim.send(sender, T.TASK_HANDOFF, body, cue_id="BUILD")

    handoff("doc", "evil://doc")
    assert sim.run().record.protocol_violations == 1
    handoff("a", "s3://build")
    sim.complete("a", "BUILD", attempt=1)
    forwarded = [(to, m.from_agent) for to, m in sim.take_sent(T.TASK_HANDOFF)]
    assert forwarded == [("c", "a")]
    (ship,) = [m for to, m in sim.take_sent(T.TASK_ASSIGN) if to == "c"]
    assert ship.payload.context["artifact"] == "s3://build"  # type: ignore[attr-defined]


def test_the_debugger_is_asked_at_most_max_consults_times() -> None:
    sim = Sim(plan_of(LIST.replace("timeout_s: 60}", "timeout_s: 60, max_consults: 1}")))
    _online(sim, ["a", "b"])
    sim.start()
    _fail_twice(sim)
    _diagnose(sim, 2, decision="retry", diagnosis="again")
    sim.take_sent(T.TASK_ASSIGN)
    sim.fail("a", "BUILD", attempt=3)
    sim.fail("a", "BUILD", attempt=4)
    assert not [a for a, _ in sim.take_sent(T.TASK_ASSIGN) if a == "doc"]
    assert sim.cue("BUILD").state is CueState.FAILED
    assert "(its debugger was asked 1 times)" in (sim.cue("BUILD").error or "")


def test_a_restarted_engine_still_waits_for_the_diagnosis_and_applies_it() -> None:
    sim = _sim()
    _fail_twice(sim)
    sim.restart()  # the hub died while the debugger thought
    _online(sim, ["a", "b"])
    assert sim.cue("BUILD").debugger == "doc"
    assert any(t.kind == "debug" for t in sim.timers)
    _diagnose(sim, 2, decision="reassign", diagnosis="move", to="b")
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["b"]


def test_an_operator_retry_starts_a_new_streak() -> None:
    sim = _sim()
    _fail_twice(sim)
    _diagnose(sim, 2, decision="abandon", diagnosis="needs a human")
    sim.engine.retry_cue("r1", "BUILD")
    sim._drain()
    cue = sim.cue("BUILD")
    assert cue.failures_in_row == 0 and cue.consults == 0 and cue.state is CueState.GO


def test_a_failure_read_again_while_the_debugger_is_asked_is_late_not_a_violation() -> None:
    """The failure that made the streak is read again (its XADD sent again after a lost
    reply, read by a leader that never saw it) while the cue waits for its debugger: the
    attempt is the same, so it once passed for an out-of-order status.failed, a protocol
    violation escalated against the target. It is a late reply: counted, nothing else."""
    sim = _sim()
    _fail_twice(sim)
    sim.fail("a", "BUILD", attempt=2, error="exit code 2: make: *** [all] Error 2")
    run = sim.run()
    assert run.record.protocol_violations == 0 and run.record.late_replies == 1
    assert not sim.engine.escalations.by_id
    assert sim.cue("BUILD").consults == 1 and not sim.take_sent(T.TASK_ASSIGN)
    _diagnose(sim, 2, decision="retry", diagnosis="flaky")
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["a"]


def test_what_the_debugger_reports_spending_counts_against_the_budget() -> None:
    """The debugger is a specialist the run asks to work: the usage on its diagnosis (an
    LLM's tokens, say) is the run's, as a context write of its already was. It was
    dropped: a debugger could spend without limit and no total showed it."""
    sim = _sim()
    _fail_twice(sim)
    body = p.StatusCompleted(
        attempt=2, result={"decision": "retry", "diagnosis": "flaky"},
        usage=p.Usage(tokens=30, cost=0.5),
    )  # fmt: skip
    sim.send("doc", T.STATUS_COMPLETED, body, "r1", "BUILD")
    assert sim.run().usage == p.Usage(tokens=30, cost=0.5)
    assert sim.cue("BUILD").usage == p.Usage(tokens=30, cost=0.5)
    assert [(e["agent"], e["tokens"]) for e in sim.events_of("usage")] == [("doc", 30)]
    sim.send("doc", T.STATUS_COMPLETED, body, "r1", "BUILD")  # late: not counted
    assert sim.run().usage == p.Usage(tokens=30, cost=0.5)


def test_a_run_whose_cue_waits_for_its_debugger_is_not_holding() -> None:
    """A run with an armed manual cue and a cue waiting for its debugger's diagnosis: the
    debugger will move it, so it is running, not `holding` (which says only an operator
    can move it). It said holding, "GO for NOTES", until the diagnosis came."""
    text = LIST.replace(
        "cues:\n",
        "start: [BUILD, NOTES]\ncues:\n  - {id: NOTES, target_agents: [c], manual: true}\n",
    )
    sim = Sim(plan_of(text))
    _online(sim, ["a", "b", "c", "doc"])
    sim.start()
    assert sim.cue("NOTES").state is CueState.ARMED
    _fail_twice(sim)
    assert sim.run().status is RunStatus.RUNNING and sim.run().hold_reason is None
    _diagnose(sim, 2, decision="abandon", diagnosis="broken for good")
    assert sim.cue("BUILD").state is CueState.FAILED
    assert sim.run().status is RunStatus.HOLDING and sim.run().hold_reason == "GO for NOTES"


def _direct_debugged(budget: str = "") -> Sim:
    """A run of one direct cue whose debugger is asked after its first failure, its task
    assigned to `a`."""
    sim = Sim(
        plan_of(f"""
cuelist: debugged
{budget}
cues:
  - id: A
    target_agents: [a]
    coordination: direct
    on_repeated_failure: {{after: 1, debugger: doc}}
""")
    )
    sim.start()
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["a"]
    return sim


def test_a_spent_budget_holds_the_debuggers_task_back_until_it_is_raised() -> None:
    """A target spends the whole budget, then fails: its debugger's task.assign is new work,
    held back as a GO is (the run holding, naming the budget), and sent once the budget is
    raised. Before, the debugger was asked at once, spending past the limit while the run's
    every GO was held."""
    sim = _direct_debugged("budget: {tokens: 10}")
    meta = {"usage": {"tokens": 10}}
    sim.send("a", T.TASK_CONTEXT, p.TaskContext(key="k", value=1, metadata=meta), "r1", "A")
    sim.fail("a", "A", attempt=1)
    assert sim.take_sent(T.TASK_ASSIGN) == []
    assert sim.cue("A").state is CueState.WAITING and sim.cue("A").debugger is None
    assert sim.run().status is RunStatus.HOLDING
    assert sim.run().hold_reason == "budget tokens spent 10 / 10"
    sim.engine.change_budget("r1", {"tokens": 100})
    sim._drain()
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["doc"]
    assert sim.cue("A").debugger == "doc" and sim.run().status is RunStatus.RUNNING
    sim.engine.change_budget("r1", {"tokens": 200})  # asked once: raising again asks no more
    sim._drain()
    assert sim.take_sent(T.TASK_ASSIGN) == []


def test_paused_gos_hold_the_debuggers_task_back_until_they_resume() -> None:
    """GOs paused (a critical escalation): a cue that fails meanwhile has its debugger asked
    when GOs resume, not while every other GO waits."""
    sim = _direct_debugged()
    sim.engine.pause("critical escalation e1")
    sim.fail("a", "A", attempt=1)
    assert sim.take_sent(T.TASK_ASSIGN) == []
    assert sim.cue("A").reason == "GO paused: critical escalation e1"
    sim.engine.resume("resolved")
    sim._drain()
    assert [a for a, _ in sim.take_sent(T.TASK_ASSIGN)] == ["doc"]
    assert sim.cue("A").debugger == "doc"


BY_CAPABILITY = """
cuelist: debugged-by-capability
specialists:
  a: {provides: [build]}
  b: {provides: [build]}
  c: {provides: [build]}
cues:
  - id: BUILD
    target: {provides: [build], count: 1}
    coordination: direct
    on_repeated_failure: {after: 2, debugger: doc}
"""


def test_a_reassign_is_never_offered_an_agent_the_cue_failed_on() -> None:
    """The candidates left out only the attempt's targets now: a streak over two agents
    offered the first one again, and a second streak offered the agent reassigned from
    (found by review: the built-in debugger sent the work back to the agent that had
    failed with 'command not found')."""
    sim = Sim(plan_of(BY_CAPABILITY))
    builders = {n: Candidate(n, provides=("build",)) for n in ("a", "b", "c")}
    sim.engine.agents_online({**builders, "doc": Candidate("doc")})
    sim.start()
    (first,) = [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]
    sim.fail(first, "BUILD", attempt=1, error="command not found")
    (again,) = [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]
    sim.fail(again, "BUILD", attempt=2, error="command not found")
    asked = [m for a, m in sim.take_sent(T.TASK_ASSIGN) if a == "doc"]
    history = FailureHistory.model_validate(asked[0].payload.action[DEBUG_KEY])  # type: ignore[attr-defined]
    assert {first, again} & set(history.candidates) == set()
    # a named target, reassigned, then failing again: its own target is not offered back
    sim = _sim()
    _fail_twice(sim)
    _diagnose(sim, 2, decision="reassign", diagnosis="a is broken", to="b")
    sim.take_sent()
    history = _fail_twice(sim, "b", first=3)
    assert "a" not in history.candidates and "b" not in history.candidates


THREE_BUILDERS = """
cuelist: debugged-thrice
specialists:
  a: {provides: [build]}
  b: {provides: [build]}
  d: {provides: [build]}
cues:
  - id: BUILD
    target_agents: [a]
    coordination: direct
    go_timeout_s: 10
    on_repeated_failure: {after: 1, debugger: doc}
"""


def test_a_late_reply_of_an_agent_reassigned_from_counts_as_late() -> None:
    """Reassigned twice (a to b, then b, timed out, to d): b's completion, late, was a
    protocol violation ('does not target it') and its usage was dropped (found by
    review)."""
    sim = Sim(plan_of(THREE_BUILDERS))
    _online(sim, ["a", "b", "d", "doc"])
    sim.start()
    sim.fail("a", "BUILD", attempt=1)
    _diagnose(sim, 1, decision="reassign", diagnosis="a is broken", to="b")
    sim.advance(10.01)  # b's attempt times out
    _diagnose(sim, 2, decision="reassign", diagnosis="b is too slow", to="d")
    assert sim.cue("BUILD").assigned == ["d"]
    body = p.StatusCompleted(attempt=2, result={}, usage=p.Usage(tokens=500))
    sim.send("b", T.STATUS_COMPLETED, body, "r1", "BUILD")
    run = sim.run()
    assert run.record.protocol_violations == 0 and run.record.late_replies == 1
    assert run.usage.tokens == 500


def test_a_reassign_by_capability_is_recorded_and_let_go_when_its_agent_goes() -> None:
    """Reassigned, a cue by capability kept its old `resolved` and wrote no `targets`
    event; and it stayed pinned to its replacement after that agent went offline, where a
    cue by capability resolves among online agents (found by review)."""
    sim = Sim(plan_of(BY_CAPABILITY))
    builders = {n: Candidate(n, provides=("build",)) for n in ("a", "b", "c")}
    sim.engine.agents_online({**builders, "doc": Candidate("doc")})
    sim.start()
    (first,) = [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]
    sim.fail(first, "BUILD", attempt=1)
    (second,) = [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]
    sim.fail(second, "BUILD", attempt=2)
    sim.take_sent()
    (to,) = {"a", "b", "c"} - {first, second}
    _diagnose(sim, 2, decision="reassign", diagnosis="both broken", to=to)
    cue = sim.cue("BUILD")
    assert cue.resolved == [to] and first in cue.past_targets and second in cue.past_targets
    assert sim.events_of("targets")[-1]["agents"] == [to]
    sim.take_sent()
    # the replacement goes offline, and its attempt fails: the next goes to an online one
    sim.engine.agents_online(
        {n: c for n, c in builders.items() if n != to} | {"doc": Candidate("doc")}
    )
    sim.fail(to, "BUILD", attempt=3)
    sent = [a for a, _ in sim.take_sent(T.TASK_ASSIGN)]
    assert sent and to not in sent, sent


WAITS_FOR_A_RUNNER = """
cuelist: build
cues:
  - id: BUILD
    target: {provides: [build], count: 1}
    coordination: direct
    resources: [runner]
    priority: 5
    on_repeated_failure: {after: 1, debugger: doc}
"""
HOLDS_THE_RUNNER = """
cuelist: hold
cues:
  - {id: HOLD, target_agents: [x], coordination: direct, resources: [runner], priority: 5}
"""


def test_an_agent_resolved_to_but_never_sent_the_cue_is_still_a_candidate() -> None:
    """A cue that waited for a resource was resolved twice: the first agent, sent nothing,
    was a past target, and a reassign that left out past targets offered nobody (found by
    reviewing the fix above). Only agents an attempt failed on are left out."""
    hold, build = plan_of(HOLDS_THE_RUNNER), plan_of(WAITS_FOR_A_RUNNER)
    sim = Sim(hold, build)
    builders = {n: Candidate(n, provides=("build",)) for n in ("a", "b")}
    sim.engine.agents_online({**builders, "x": Candidate("x"), "doc": Candidate("doc")})
    sim.start("r1", hold)
    sim.start("r2", build)
    assert sim.cue("BUILD", "r2").state is CueState.WAITING  # for the runner
    sim.complete("x", "HOLD", run_id="r1")
    (agent,) = [a for a, m in sim.take_sent(T.TASK_ASSIGN) if m.cue_id == "BUILD"]
    sim.fail(agent, "BUILD", attempt=sim.cue("BUILD", "r2").attempt, run_id="r2")
    asked = [m for a, m in sim.take_sent(T.TASK_ASSIGN) if a == "doc"]
    history = FailureHistory.model_validate(asked[0].payload.action[DEBUG_KEY])  # type: ignore[attr-defined]
    assert history.candidates == sorted({"a", "b"} - {agent})


def test_an_agent_a_refused_reassign_named_is_a_candidate_later() -> None:
    """A reassign refused (its agent offline then) did not send the cue there: after an
    operator's retry, with that agent back, it is offered."""
    sim = Sim(plan_of(THREE_BUILDERS))
    _online(sim, ["a", "doc"])  # b offline
    sim.start()
    sim.fail("a", "BUILD", attempt=1)
    _diagnose(sim, 1, decision="reassign", diagnosis="a is broken", to="b")
    assert sim.cue("BUILD").state is CueState.FAILED  # refused: nobody to take it
    _online(sim, ["a", "b", "doc"])
    sim.take_sent()
    sim.engine.retry_cue("r1", "BUILD")
    sim._drain()
    sim.fail("a", "BUILD", attempt=sim.cue("BUILD").attempt)
    asked = [m for a, m in sim.take_sent(T.TASK_ASSIGN) if a == "doc"]
    history = FailureHistory.model_validate(asked[-1].payload.action[DEBUG_KEY])  # type: ignore[attr-defined]
    assert "b" in history.candidates
