"""Targets by capability on the pure engine: resolution when a cue fires, waiting for a
matching agent, the guard on resolved targets, retries, restarts and dry runs."""

from __future__ import annotations

import pytest

from hub.api.views import cue_public
from hub.engine.dry import dry_run
from hub.engine.targets import NO_MATCH
from protocols import payloads as p
from protocols.messages import MessageType as T
from protocols.states import CueState, RunStatus
from protocols.targeting import Candidate, Target
from tests.hub.sim import KEYS, Sim, plan_of

REV_A = Candidate("rev-a", provides=("code_review",), labels={"gpu": True, "busy": True})
REV_B = Candidate("rev-b", provides=("code_review",), labels={"gpu": True})
PLAIN = Candidate("plain", provides=("build",), labels={"gpu": False})
EVERYONE = {c.name: c for c in (REV_A, REV_B, PLAIN)}

ONE_REVIEWER = """
cuelist: review
cues:
  - {id: REVIEW, target: {provides: [code_review], count: 1}, auto_follow: TRAIN}
  - {id: TRAIN, target: {filter: "labels.gpu AND NOT labels.busy"}}
"""


def _sim(text: str = ONE_REVIEWER, online: dict[str, Candidate] | None = None) -> Sim:
    sim = Sim(plan_of(text))
    sim.engine.agents_online(EVERYONE if online is None else online)
    return sim


def test_count_one_goes_to_exactly_one_provider_and_the_filter_picks_its_match() -> None:
    sim = _sim()
    sim.start()
    warned = sim.take_sent(T.COORD_WARNING)
    assert [a for a, _ in warned] == ["rev-a"]  # both idle, never chosen: by name
    assert warned[0][1].target_agents == ("rev-a",)
    assert warned[0][1].payload.target_agents == ["rev-a"]
    cr = sim.cue("REVIEW")
    assert cr.resolved == ["rev-a"] and list(cr.targets) == ["rev-a"]
    assert cr.target == {"provides": ["code_review"], "count": 1}
    (event,) = sim.events_of("targets")
    assert event["cue"] == "REVIEW" and event["agents"] == ["rev-a"]
    assert event["matching"] == ["rev-a", "rev-b"]
    public = cue_public(cr)
    assert public.target == {"provides": ["code_review"], "count": 1}
    assert public.resolved == ["rev-a"]
    sim.call_through("REVIEW", ["rev-a"])
    assert sim.cue("REVIEW").state is CueState.COMPLETED
    sent_to = {a for a, _ in sim.take_sent()}
    assert sent_to == {"rev-a", "rev-b"}  # TRAIN's call went to rev-b, plain got nothing
    assert sim.cue("TRAIN").resolved == ["rev-b"]
    sim.call_through("TRAIN", ["rev-b"])
    assert sim.run().status is RunStatus.SUCCESS
    assert all(a != "plain" for a, _ in sim.sent)


def test_least_loaded_then_least_recently_chosen() -> None:
    two = """
cuelist: two
start: [R1, R2]
cues:
  - {id: R1, target: {provides: [code_review], count: 1}}
  - {id: R2, target: {provides: [code_review], count: 1}}
"""
    sim = _sim(two)
    sim.start()
    assert sim.cue("R1").resolved == ["rev-a"]
    assert sim.cue("R2").resolved == ["rev-b"]  # rev-a is in a call already
    sim.call_through("R1", ["rev-a"])
    sim.call_through("R2", ["rev-b"])
    sim.start("r2")
    assert sim.cue("R1", "r2").resolved == ["rev-a"]  # both idle: rev-a was chosen longer ago
    assert sim.cue("R2", "r2").resolved == ["rev-b"]


def test_no_match_waits_saying_why_and_fires_when_a_matching_agent_comes_online() -> None:
    sim = _sim(online={"plain": PLAIN})
    sim.start()
    cr = sim.cue("REVIEW")
    assert cr.state is CueState.WAITING
    assert cr.reason == f"{NO_MATCH}{{provides: [code_review], count: 1}} (none online)"
    assert not sim.take_sent()
    assert sim.run().status is RunStatus.RUNNING  # not holding: no operator is needed
    assert sim.run().record.waits == [f"REVIEW: {cr.reason}"]
    sim.engine.agents_online({"plain": PLAIN, "rev-b": REV_B})
    sim._drain()
    assert [a for a, _ in sim.take_sent(T.COORD_WARNING)] == ["rev-b"]
    assert sim.cue("REVIEW").state is CueState.WARNING
    assert sim.cue("REVIEW").fired_by is not None and sim.cue("REVIEW").fired_by.value == (
        "run-start"
    )


def test_count_more_than_online_matches_waits_for_the_rest() -> None:
    sim = _sim("cuelist: x\ncues:\n  - {id: A, target: {provides: [code_review], count: 2}}\n",
               online={"rev-a": REV_A})  # fmt: skip
    sim.start()
    assert sim.cue("A").reason == f"{NO_MATCH}{{provides: [code_review], count: 2}} (1 of 2 online)"
    sim.engine.agents_online(EVERYONE)
    sim._drain()
    assert sorted(a for a, _ in sim.take_sent(T.COORD_WARNING)) == ["rev-a", "rev-b"]


def test_an_operator_go_that_finds_no_agent_waits_and_keeps_its_trigger() -> None:
    text = "cuelist: x\ncues:\n  - {id: A, manual: true, target: {provides: [code_review]}}\n"
    sim = _sim(text, online={})
    sim.start()
    assert sim.cue("A").state is CueState.ARMED
    sim.engine.operator_go("r1", "A")
    sim._drain()
    assert sim.cue("A").state is CueState.WAITING
    sim.engine.agents_online(EVERYONE)
    sim._drain()
    assert sim.cue("A").state is CueState.WARNING
    assert sorted(sim.cue("A").resolved) == ["rev-a", "rev-b"]  # no count: every match
    assert sim.cue("A").fired_by is not None and sim.cue("A").fired_by.value == "operator"


def test_only_resolved_targets_count_for_the_cue() -> None:
    sim = _sim()
    sim.start()
    sim.ack_warning("rev-b", "REVIEW")  # provides code_review, but was not chosen
    assert sim.cue("REVIEW").targets == {"rev-a": "warned"}
    (esc,) = sim.engine.escalations.by_id.values()
    assert esc.payload["reason"] == "not_in_run"  # no cue of the run resolved to it yet
    assert esc.run_id is None  # and a run it has no part in is not touched
    sim.ack_warning("rev-a", "REVIEW")
    assert sim.cue("REVIEW").state is CueState.STANDBY


def test_a_retry_resolves_again_and_a_reply_for_the_old_attempt_is_late() -> None:
    text = (
        "cuelist: x\ncues:\n  - {id: A, retries: 1, target: {provides: [code_review], count: 1}}\n"
    )
    sim = _sim(text)
    sim.start()
    sim.ack_warning("rev-a", "A")
    sim.ack_standby("rev-a", "A")
    sim.fail("rev-a", "A")
    cr = sim.cue("A")
    assert cr.attempt == 2 and cr.resolved == ["rev-b"]  # rev-a was still engaged: rev-b
    assert cr.past_targets == ["rev-a"]
    sim.complete("rev-a", "A", attempt=1)  # rev-a woke up late
    assert sim.run().record.late_replies == 1 and sim.run().record.protocol_violations == 0
    sim.call_through("A", ["rev-b"], attempt=2)
    assert sim.run().status is RunStatus.SUCCESS


def test_direct_cues_resolve_at_assign() -> None:
    text = (
        "cuelist: x\ncues:\n  - {id: A, coordination: direct, "
        "target: {filter: 'labels.gpu AND NOT labels.busy'}}\n"
    )
    sim = _sim(text)
    sim.start()
    (assigned,) = sim.take_sent(T.TASK_ASSIGN)
    assert assigned[0] == "rev-b"
    sim.complete("rev-b", "A")
    assert sim.run().status is RunStatus.SUCCESS


def test_a_restart_keeps_the_resolution_and_rechecks_waiting_cues() -> None:
    sim = _sim()
    sim.start()
    sim.restart()
    assert sim.cue("REVIEW").resolved == ["rev-a"]
    sim.engine.agents_online({})  # the driver does this when a term starts
    sim._drain()
    sim.call_through("REVIEW", ["rev-a"])  # the resolved target still counts after it
    assert sim.cue("TRAIN").state is CueState.WAITING  # nobody online now
    assert NO_MATCH in (sim.cue("TRAIN").reason or "")
    sim.restart()
    sim.engine.agents_online(EVERYONE)
    sim._drain()
    assert sim.cue("TRAIN").resolved == ["rev-b"]


def test_dry_run_resolves_among_inline_contracts_and_stands_in_for_the_rest() -> None:
    text = """
cuelist: dry
specialists:
  inline-rev: {provides: [code_review]}
cues:
  - {id: REVIEW, target: {provides: [code_review], count: 1}, auto_follow: TRAIN}
  - {id: TRAIN, target: {filter: "labels.tpu"}}
"""
    run, _ = dry_run(plan_of(text), "d1", {}, KEYS, agents={})
    assert run.status is RunStatus.DRY
    assert run.cues["REVIEW"].resolved == ["inline-rev"]
    assert run.cues["TRAIN"].resolved == ["stand-in-1"]
    assert run.cues["TRAIN"].state is CueState.COMPLETED
    assert any("stand-ins stand-in-1" in w for w in run.record.waits)


def test_the_hold_review_does_not_hold_a_run_waiting_for_an_agent() -> None:
    text = """
cuelist: x
start: [A]
cues:
  - {id: A, target: {provides: [code_review]}}
  - {id: B, manual: true, target_agents: [plain]}
"""
    sim = _sim(text, online={})
    sim.start()
    assert sim.cue("B").state is CueState.ARMED
    assert sim.run().status is RunStatus.RUNNING  # A moves on its own once an agent comes
    sim.engine.agents_online(EVERYONE)
    sim._drain()
    sim.call_through("A", ["rev-a", "rev-b"])
    assert sim.run().status is RunStatus.HOLDING  # now only the GO for B is left
    sim.send("plain", T.ACK_WARNING, p.AckWarning(attempt=1), cue_id="A")
    assert sim.run().record.protocol_violations == 1  # plain takes part, but not in A


def test_the_wiring_map_skips_cues_known_only_when_they_fire() -> None:
    from hub.api import wiring_map

    doc = {
        "cuelist": "review",
        "cues": [
            {"id": "BUILD", "target_agents": ["builder"], "auto_follow": "REVIEW"},
            {"id": "REVIEW", "target": {"provides": ["code_review"]}, "handoff": {"to": "qa"}},
        ],
    }
    registry = [{"agent": "rev-a", "online": True, "contract": {"provides": ["code_review"]}}]
    built = wiring_map.build(registry, [doc])
    agents = {a["agent"]: a for a in built["agents"]}
    assert agents["builder"]["cues"] == ["review/BUILD"]
    assert agents["rev-a"]["cues"] == []  # who REVIEW goes to is decided when it fires


def test_a_retry_that_finds_no_agent_waits_and_the_failed_attempt_s_replies_are_late() -> None:
    text = (
        "cuelist: x\ncues:\n  - {id: A, retries: 1, target: {provides: [code_review], count: 1}}\n"
    )
    sim = _sim(text, online={"rev-a": REV_A})
    sim.start()
    sim.ack_warning("rev-a", "A")
    sim.ack_standby("rev-a", "A")
    sim.engine.agents_online({})  # rev-a went offline mid-call
    sim._drain()
    sim.fail("rev-a", "A")
    cr = sim.cue("A")
    assert cr.state is CueState.WAITING and cr.resolved == [] and cr.past_targets == ["rev-a"]
    assert (cr.reason or "").startswith(NO_MATCH)
    sim.complete("rev-a", "A", attempt=1)  # its attempt is over: late, not a violation
    assert sim.run().record.late_replies == 1 and sim.run().record.protocol_violations == 0
    sim.engine.agents_online({"rev-b": REV_B})
    sim._drain()
    assert sim.cue("A").resolved == ["rev-b"] and sim.cue("A").attempt == 2
    sim.call_through("A", ["rev-b"], attempt=2)
    assert sim.run().status is RunStatus.SUCCESS


def test_the_same_agents_said_online_again_cost_the_waiting_cues_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many runs wait for two reviewers. The same agents said online again (a replica
    restarting, or an agent flooding `status.online`) make no cue look; agents that change
    but still match too few are matched once per target, not once per cue, and rewrite no
    run: before, each such `status.online` rewrote every waiting run (1,000 runs: 197 ms
    of the engine and 1,000 runs written, per message). A change in how many match is one
    reason per cue; enough of them, and every cue fires."""
    text = "cuelist: x\ncues:\n  - {id: A, target: {provides: [code_review], count: 2}}\n"
    sim = _sim(text, online={"plain": PLAIN})
    runs = [f"r{i}" for i in range(50)]
    for run_id in runs:
        sim.start(run_id)
    assert all(sim.cue("A", r).state is CueState.WAITING for r in runs)
    looked: list[str] = []
    real = Target.matches

    def matches(target: Target, agent: Candidate) -> bool:
        looked.append(agent.name)
        return real(target, agent)

    monkeypatch.setattr(Target, "matches", matches)

    def written_after(directory: dict[str, Candidate]) -> tuple[set[str], list[str]]:
        sim.engine.agents_online(directory)
        sim._drain()
        out = sim.outs[-1]
        return out.dirty, [event["type"] for _, event in out.events]

    assert written_after({"plain": PLAIN}) == (set(), [])
    assert looked == []
    busy = Candidate("plain", provides=("build",), labels={"gpu": False, "busy": True})
    assert written_after({"plain": busy}) == (set(), [])
    assert looked == ["plain"]  # once for the plan's target, not once per run
    dirty, events = written_after({"plain": busy, "rev-a": REV_A})
    assert dirty == set(runs) and events == ["reason"] * len(runs)
    assert (
        sim.cue("A", "r7").reason
        == f"{NO_MATCH}{{provides: [code_review], count: 2}} (1 of 2 online)"
    )
    sim.engine.agents_online({"plain": busy, "rev-a": REV_A, "rev-b": REV_B})
    sim._drain()
    assert all(sim.cue("A", r).state is CueState.WARNING for r in runs)


@pytest.mark.parametrize("coordination", ["cued", "direct"])
def test_a_retry_moves_the_load_to_the_agent_it_went_to(coordination: str) -> None:
    """A retry that stays in its state (a direct cue's GO to GO; a cued one's WARNING to
    WARNING after an ack timeout) kept counting the failed agent as busy and not the new
    one, so the next run's cue went to the busy agent (found by review)."""
    text = (
        f"cuelist: x\ncues:\n  - {{id: A, coordination: {coordination}, retries: 1, "
        "ack_timeout_s: 5, target: {provides: [code_review], count: 1}}\n"
    )
    sim = _sim(text)
    sim.start("r1")
    (first,) = sim.cue("A").resolved
    if coordination == "direct":
        sim.fail(first, "A")
    else:
        sim.advance(5.01)  # the ack deadline: WARNING again, on the other reviewer
    (second,) = sim.cue("A").resolved
    assert second != first and sim.cue("A").attempt == 2
    assert sim.engine.loads == {second: 1}
