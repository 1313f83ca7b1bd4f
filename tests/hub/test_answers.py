"""An operator's answer to a specialist's question goes back to that agent (`task.input`),
and GO carries the cue's description, on the pure engine with a fake clock."""

from __future__ import annotations

from hub.engine import guard
from protocols import payloads as p
from protocols.codec import make
from protocols.messages import MessageType as T
from protocols.states import Severity
from tests.hub.sim import Sim, plan_of

ASK = """
cuelist: ask
cues:
  - id: C1
    description: Ask the remote agent what colour
    target_agents: [remote, other]
    action: {url: "http://agent.test", skill: colours}
"""


def _at_go(sim: Sim) -> None:
    sim.start()
    for agent in ("remote", "other"):
        sim.ack_warning(agent, "C1")
    for agent in ("remote", "other"):
        sim.ack_standby(agent, "C1")


def _ask(sim: Sim, agent: str, cause: str, detail: str = "what colour?") -> str:
    body = p.EscalationError(severity=Severity.MEDIUM, cause=cause, detail=detail)
    msg = make(T.ESCALATION_ERROR, body, from_agent=agent, run_id="r1", cue_id="C1")
    guard.specialist_escalation(sim.engine, msg, Severity.HIGH)
    sim._drain()
    (esc,) = [
        e for e in sim.engine.escalations.by_id.values()
        if e.payload.get("cause") == cause and e.status == "open"
    ]  # fmt: skip
    return esc.id


def _resolve(sim: Sim, esc_id: str, answer: str, note: str = "") -> None:
    sim.engine.resolve(esc_id, None, note, answer)
    sim._drain()


def test_go_carries_the_cue_description() -> None:
    sim = Sim(plan_of(ASK))
    _at_go(sim)
    gos = sim.take_sent(T.COORD_GO)
    assert {m.body(p.CoordGo).description for _, m in gos} == {"Ask the remote agent what colour"}


def test_the_answer_goes_to_the_agent_that_asked_only() -> None:
    sim = Sim(plan_of(ASK))
    _at_go(sim)
    esc_id = _ask(sim, "remote", "input_required:task-1:m1")
    assert sim.engine.escalations.by_id[esc_id].raised_by == "remote"
    _resolve(sim, esc_id, "blue")
    (sent,) = sim.take_sent(T.TASK_INPUT)
    agent, msg = sent
    assert agent == "remote" and msg.target_agents == ("remote",)
    assert (msg.run_id, msg.cue_id) == ("r1", "C1")
    answer = msg.body(p.TaskInput)
    assert answer.answer == "blue" and answer.escalation_id == esc_id
    assert sim.engine.escalations.by_id[esc_id].resolution["answer"] == "blue"
    assert answer.cause == "input_required:task-1:m1" and answer.question == "what colour?"
    assert answer.action == {"url": "http://agent.test", "skill": "colours"}
    assert answer.attempt == 1
    events = [e for _, e in sim.outs[-1].events if e["type"] == "answer"]
    assert events and events[0]["to"] == "remote"


def test_a_second_question_after_an_answer_is_raised_anew() -> None:
    sim = Sim(plan_of(ASK))
    _at_go(sim)
    first = _ask(sim, "remote", "input_required:task-1")
    assert _ask(sim, "remote", "input_required:task-1") == first  # asked again: counted
    assert sim.engine.escalations.by_id[first].count == 2
    _resolve(sim, first, "blue")
    second = _ask(sim, "remote", "input_required:task-1", "and what size?")
    assert second != first
    assert sim.engine.escalations.by_id[second].status == "open"
    _resolve(sim, second, "large")
    assert [m.body(p.TaskInput).answer for _, m in sim.take_sent(T.TASK_INPUT)] == [
        "blue",
        "large",
    ]


def test_an_answered_question_taken_in_by_a_new_leader_leaves_its_slot_free() -> None:
    """A new leader takes in the escalations of the runs it resumes (hub.engine.driver),
    answered questions too: one claimed its slot again, so the next question about the
    cue was counted on the answered one, never shown nor answered."""
    sim = Sim(plan_of(ASK))
    _at_go(sim)
    first = _ask(sim, "remote", "input_required:task-1")
    _resolve(sim, first, "blue")
    held = list(sim.engine.escalations.by_id.values())
    sim.restart()  # a new leader, resumed from what the store holds
    for esc in held:
        sim.engine.escalations.take_in(esc.model_copy(deep=True))
    second = _ask(sim, "remote", "input_required:task-1", "and what size?")
    assert second != first and sim.engine.escalations.by_id[first].count == 1


def test_no_answer_for_other_escalations_a_note_alone_or_a_finished_cue() -> None:
    sim = Sim(plan_of(ASK))
    _at_go(sim)
    plain = _ask(sim, "remote", "disk_full")
    _resolve(sim, plain, "cleaned up")
    dismissed = _ask(sim, "remote", "input_required:a")
    _resolve(sim, dismissed, "", note="resolved on the desk")  # a note is not an answer
    late = _ask(sim, "remote", "input_required:b")
    sim.complete("remote", "C1")
    sim.complete("other", "C1")
    _resolve(sim, late, "too late")
    assert sim.take_sent(T.TASK_INPUT) == []


def test_answered_questions_leave_memory_with_their_run() -> None:
    """An answered question's slot is freed, and the run's end forgot only escalations
    holding a slot: answered questions stayed in the leader's memory for as long as it
    led (found by review: 100 of them after two runs of 50)."""
    sim = Sim(plan_of(ASK))
    _at_go(sim)
    for n in range(5):
        _resolve(sim, _ask(sim, "remote", f"input_required:task-{n}"), "blue")
    assert len(sim.engine.escalations.by_id) == 5
    sim.engine.cancel("r1")
    sim._drain()
    sim.engine.forget("r1")  # as the driver does once the run's ending write landed
    assert "r1" not in sim.engine.runs
    assert not sim.engine.escalations.by_id
