"""Answers to specialists' questions: an operator resolves an escalation a specialist raised
to ask something (cause `input_required...`) with an `answer`, which goes back to that agent
as a `task.input`, in the same fenced write as the resolution (nothing acknowledged is lost)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hub.engine.escalations import Escalation
from protocols import payloads as p
from protocols.codec import make
from protocols.messages import MessageType as T

if TYPE_CHECKING:
    from hub.engine.base import EngineBase


def forward(engine: EngineBase, esc: Escalation, answer: str) -> bool:
    """Send `answer` to the agent that asked, if its cue is still live; True when sent.

    The question's dedup slot is freed, so the next question about the cue (a remote
    agent may ask more than once) is raised anew instead of counted on this one."""
    if not esc.asks:
        return False
    engine.escalations.free_slot(esc)
    if not answer.strip():
        return False  # resolved without an answer: dismissed, nothing to tell
    run = engine.runs.get(esc.run_id or "")
    cue_id = esc.cue_id or ""
    if run is None or run.status.done or cue_id not in run.cues:
        return False
    cr = run.cues[cue_id]
    if cr.state.done or esc.raised_by not in engine.targets_of(run, cue_id):
        return False
    payload = p.TaskInput(
        cue_id=cue_id, attempt=max(cr.attempt, 1), escalation_id=esc.id,
        cause=str(esc.payload.get("cause") or esc.cause), question=esc.detail,
        answer=answer, action=engine.action_of(run, cue_id),
    )  # fmt: skip
    msg = make(T.TASK_INPUT, payload, target_agents=(esc.raised_by,), run_id=run.run_id,
               cue_id=cue_id)  # fmt: skip
    engine.out.messages.append((engine.keys.inbox(esc.raised_by), msg))
    run.record.messages_out += 1
    engine.mark_dirty(run)
    engine.record_event(run, "answer", cue=cue_id, escalation=esc.id, to=esc.raised_by)
    return True
