"""Escalations as the engine raises and resolves them, pausing GOs, and holding runs.

A run is `holding` when only an operator can move it: nothing of it is pending or in a
call or waiting for a resource, an agent or a debugger, and what is left is armed cues (a
GO), cues waiting for conditions that no unfinished cue of the run raises but the waiting
cue itself or one after it (which waits for it: an approval), GOs paused by a critical
escalation, or GOs held back by a spent budget (hub.engine.budgets).
`hold_reason` names each need. One function decides (`hold_cause`), once per step for
every run the step touched (cheaply: only while no cue of the run moves).
"""

from __future__ import annotations

from collections.abc import Iterable

from hub.engine import answers
from hub.engine.base import MOVING, PAUSED, EngineBase, _all
from hub.engine.budgets import held_by_budget
from hub.engine.contest import check_winner
from hub.engine.escalations import DETAIL_CHARS, OPEN, Escalation, clipped
from hub.engine.state import CueRun, RunState
from protocols import payloads as p
from protocols.errors import Conflict, NotFound
from protocols.graph import raised_by_hand_only
from protocols.messages import HUB
from protocols.messages import MessageType as T
from protocols.states import (
    CueState,
    RunStatus,
    Severity,
    TargetState,
)

NOTICE_CHARS = 500  # of the broadcast.notice a high or critical escalation sends everyone


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
        if esc.type is T.ESCALATION_CONFLICT and winner:
            # before anything changes: a step's partial effects are committed with its
            # refusal, and a winner refused here left the escalation resolved all the same
            check_winner(esc, winner)
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
            self._resume_after(esc)
        return esc

    def _resume_after(self, esc: Escalation) -> None:
        """A critical escalation is resolved: GOs resume unless another critical one is
        still open, which keeps them paused (and is the pause's reason from now on)."""
        still = next(
            (e for e in self.escalations.by_id.values()
             if e.severity is Severity.CRITICAL and e.status == OPEN),
            None,
        )  # fmt: skip
        if still is None:
            self.resume(f"escalation {esc.id} resolved")
        elif self.paused == _critical(esc):
            self.paused = _critical(still)
            self.out.paused_changed = True

    def escalate(
        self, run: RunState | None, cue_id: str | None, mt: T, payload: p.Escalation,
        *, raised_by: str = HUB, cause: str | None = None,
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
        detail, data = payload.detail, payload.model_dump(mode="json")
        if raised_by != HUB:  # what its sender chose, kept and shown in a few kilobytes
            detail, data = detail[:DETAIL_CHARS], clipped(data)
            data["detail"] = detail
        esc = Escalation(
            type=mt, severity=payload.severity, run_id=slot[0], cue_id=cue_id, cause=slot[2],
            detail=detail, payload=data, raised_by=raised_by, created_at=now, updated_at=now,
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
            text = f"{esc.severity.value} {mt.value}: {esc.detail or esc.cause}"[:NOTICE_CHARS]
            self.broadcast(T.BROADCAST_NOTICE, p.BroadcastNotice(text=text, severity=esc.severity))
        if new and esc.severity is Severity.CRITICAL:
            self.pause(_critical(esc))
        return esc

    def pause(self, reason: str) -> None:
        if self.paused is None:
            self.paused = reason
            self.out.paused_changed = True
            self.broadcast(T.BROADCAST_PAUSE, p.BroadcastPause(reason=reason))

    def resume(self, reason: str) -> None:
        if self.paused is None:
            return
        self.broadcast(T.BROADCAST_RESUME, p.BroadcastResume(reason=reason))
        self._unpause()

    def follow_pause(self, reason: str | None, write: bool = False) -> None:
        """Another engine partition paused (`reason`) or resumed (None) every GO: this one
        does too, telling no agent (that one did). `write`: the flag is written with this
        step (an operator's command, which reaches every partition)."""
        written = self.out.paused_changed or write
        if reason is not None and self.paused is None:
            self.paused = reason
        elif reason is None and self.paused is not None:
            self._unpause()
        self.out.paused_changed = written

    def _unpause(self) -> None:
        self.paused = None
        self.out.paused_changed = True
        for run in list(self.runs.values()):
            self.mark_dirty(run)  # its hold is reviewed with this step
            for cue_id, cr in run.cues.items():
                if cr.state is CueState.STANDBY and _all(cr, TargetState.READY):
                    self.go(run, cue_id)
                elif _paused(cr):  # a direct cue's task.assign
                    self.go_held(run, cue_id)

    def _hold(self, run: RunState, cue_id: str, reason: str) -> None:
        """A GO that may not go now (paused): the cue says why; the run may be holding."""
        self.set_reason(run, cue_id, f"{PAUSED}{reason}")

    # -- holding ------------------------------------------------------------------------
    def review_holds(self, run_ids: Iterable[str]) -> None:
        """Holding or running, for each run a step touched (called as the step is taken)."""
        for run_id in list(run_ids):
            run = self.runs.get(run_id)
            if run is None or run.dry or run.status.done:
                continue
            quiet = not self.moving.get(run_id) or self.paused is not None
            quiet = quiet or self.over_budget(run) is not None  # its GOs are held back
            cause = self.hold_cause(run) if quiet else None
            if cause is not None and (run.status, run.hold_reason) != (RunStatus.HOLDING, cause):
                run.status, run.hold_reason = RunStatus.HOLDING, cause
                self.record_event(run, "run", status=run.status.value, reason=cause)
                self.mark_dirty(run)
            elif cause is None and run.status is RunStatus.HOLDING:
                run.status, run.hold_reason = RunStatus.RUNNING, None
                self.record_event(run, "run", status=run.status.value)
                self.mark_dirty(run)

    def hold_cause(self, run: RunState) -> str | None:
        """What only an operator can give the run ("GO for DEPLOY; condition
        approval_received"), or None while anything else can still move it."""
        unfinished = [(c, cr) for c, cr in run.cues.items() if not cr.state.done]
        needs: list[str] = []
        budget = self.over_budget(run)  # named once for every GO it holds back
        if budget is not None and unfinished:
            needs.append(budget)
        for cue_id, cr in unfinished:
            if _paused(cr):
                if not held_by_budget(cr):  # the budget is named once, above
                    needs.append(cr.reason or PAUSED)  # "GO paused: critical escalation ..."
            elif cr.state in MOVING or (run.run_id, cue_id) in self.book.waiting:
                return None  # in a call, about to be, or waiting for another's resource
            elif cr.state is CueState.WAITING and cr.awaiting is not None:
                return None  # waiting for a matching agent to come online
            elif cr.state is CueState.WAITING and cr.debugger is not None:
                return None  # waiting for its debugger's diagnosis (hub.engine.debugging)
            elif cr.state is CueState.ARMED:
                needs.append(f"GO for {cue_id}")
            elif cr.state is CueState.WAITING:
                needs += [f"condition {flag}" for flag in self.unraisable(run, cue_id)]
        return "; ".join(dict.fromkeys(needs)) or None

    def unraisable(self, run: RunState, cue_id: str) -> list[str]:
        """The conditions the cue waits for that only an operator can raise: no unfinished
        cue raises them but the cue itself and the cues after it, which wait for it."""
        plan = self.plans[run.run_id]
        needs = []
        for flag in plan.cues[cue_id].conditions:
            if flag in run.conditions:
                continue
            raisers = [c for c in plan.raisers.get(flag, ()) if not run.cues[c].state.done]
            if raised_by_hand_only(cue_id, raisers, plan.after):
                needs.append(flag)
        return needs


def _critical(esc: Escalation) -> str:
    """The reason GOs are paused for a critical escalation."""
    return f"critical escalation {esc.id}"


def _paused(cr: CueRun) -> bool:
    return (cr.reason or "").startswith(PAUSED)
