"""Escalations as the engine raises and resolves them, and pausing GOs."""

from __future__ import annotations

from hub.engine import answers
from hub.engine.base import EngineBase, _all
from hub.engine.escalations import Escalation
from hub.engine.state import RunState
from protocols import payloads as p
from protocols.errors import Conflict, NotFound
from protocols.messages import MessageType as T
from protocols.states import (
    CueState,
    RunStatus,
    Severity,
    TargetState,
)


class AlertsMixin(EngineBase):
    """The engine's part that escalates (deduplicated), pauses, resumes and resolves."""

    def resolve(
        self, esc_id: str, winner: str | None, note: str = "", answer: str = ""
    ) -> Escalation:
        """A binding operator decision; for a conflict `winner` is `run/cue` or a cue id;
        for a specialist's question, `answer` goes back to it."""
        esc = self.escalations.get(esc_id)
        if esc is None:
            raise NotFound(f"no open escalation {esc_id}")
        if esc.status == "resolved":
            raise Conflict(f"escalation {esc_id} is already resolved")
        esc.status = "resolved"
        esc.resolution = {"winner": winner, "note": note, "at": self.clock()}
        if answer:
            esc.resolution["answer"] = answer
        esc.updated_at = self.clock()
        self.out.escalations[esc.id] = esc
        if esc.type is T.ESCALATION_CONFLICT and winner:
            self.arbitrate(esc, winner)
        answers.forward(self, esc, answer)  # a specialist's question: the answer goes back
        if self.paused and esc.severity is Severity.CRITICAL:
            self.resume(f"escalation {esc_id} resolved")
        return esc

    def escalate(
        self, run: RunState | None, cue_id: str | None, mt: T, payload: p.Escalation,
        *, raised_by: str = "hub", cause: str | None = None,
    ) -> Escalation:  # fmt: skip
        """Raise an escalation once per (run, cue, cause); later ones are counted on it
        (without an event each: a flood of them must not push a run's history out)."""
        now = self.clock()
        slot = (run.run_id if run else None, cue_id, cause or payload.cause or mt.value)
        first = self.escalations.in_slot(slot)
        if first is not None:
            first.count += 1
            first.updated_at = now
            self.out.escalations[first.id] = first
            return first
        esc = Escalation(
            type=mt, severity=payload.severity, run_id=slot[0], cue_id=cue_id, cause=slot[2],
            detail=payload.detail, payload=payload.model_dump(mode="json"),
            raised_by=raised_by, created_at=now, updated_at=now,
        )  # fmt: skip
        esc, new = self.escalations.raise_(esc)
        self.out.escalations[esc.id] = esc
        if run is not None:
            run.record.note("escalations", esc.id)
            self.mark_dirty(run)
            self.record_event(
                run, "escalation", id=esc.id, type=mt.value, severity=esc.severity.value,
                raised_by=raised_by,
            )  # fmt: skip
        if new and esc.severity in (Severity.HIGH, Severity.CRITICAL):
            text = f"{esc.severity.value} {mt.value}: {esc.detail or esc.cause}"
            self.broadcast(T.BROADCAST_NOTICE, p.BroadcastNotice(text=text, severity=esc.severity))
        if new and esc.severity is Severity.CRITICAL:
            self.pause(f"critical escalation {esc.id}")
        return esc

    def pause(self, reason: str) -> None:
        if self.paused is None:
            self.paused = reason
            self.out.paused_changed = True
            self.broadcast(T.BROADCAST_PAUSE, p.BroadcastPause(reason=reason))

    def resume(self, reason: str) -> None:
        if self.paused is None:
            return
        self.paused = None
        self.out.paused_changed = True
        self.broadcast(T.BROADCAST_RESUME, p.BroadcastResume(reason=reason))
        for run in list(self.runs.values()):
            if run.status is RunStatus.HOLDING:
                run.status, run.hold_reason = RunStatus.RUNNING, None
                self.record_event(run, "run", status=run.status.value)
            for cue_id, cr in run.cues.items():
                if cr.state is CueState.STANDBY and _all(cr, TargetState.READY):
                    self.go(run, cue_id)

    def _hold(self, run: RunState, cue_id: str, reason: str) -> None:
        run.cues[cue_id].reason = reason
        if run.status is RunStatus.RUNNING:
            run.status, run.hold_reason = RunStatus.HOLDING, reason
            self.record_event(run, "run", status=run.status.value, reason=reason)
        self.mark_dirty(run, cue_id)
