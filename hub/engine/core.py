"""The cue state machine of SPEC §5: firing, the WARNING/STANDBY/GO call, completion, failure.

Pure: no I/O. Every input mutates run state and appends to `self.out` (an Outbox) what
must be written and sent; the driver flushes the outbox in one fenced write, so a state
change and the messages it causes are recorded together or not at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hub.engine.escalations import Escalation, EscalationBook
from hub.engine.outbox import ARBITRATION, Outbox, Timer
from hub.engine.plan import Plan
from hub.engine.resources import Claim, ResourceBook
from hub.engine.state import CueRun, RunState
from protocols import payloads as p
from protocols.codec import make
from protocols.contracts import Contract
from protocols.errors import Conflict, NotFound
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.states import (
    ConflictStrategy,
    ConflictType,
    Coordination,
    CueState,
    FiredBy,
    OnFailure,
    Phase,
    RunStatus,
    Severity,
    TargetState,
)

ACTIVE = (CueState.WARNING, CueState.STANDBY, CueState.GO)


class Engine:
    """Every active run on the leading hub, the resource book, and the escalation book."""

    early_warning: bool = True  # warn a successor when its last predecessor is GO'd

    def __init__(
        self,
        keys: Keys,
        *,
        clock: Callable[[], float] = time.time,
        contract_of: Callable[[str], Contract | None] = lambda agent: None,
    ) -> None:
        self.keys = keys
        self.clock = clock
        self.contract_of = contract_of
        self.runs: dict[str, RunState] = {}
        self.plans: dict[str, Plan] = {}  # by run id
        self.book = ResourceBook()
        self.escalations = EscalationBook()
        self.paused: str | None = None  # reason GOs are paused (critical escalation)
        self.out = Outbox()

    def take(self) -> Outbox:
        out, self.out = self.out, Outbox()
        return out

    # -- run lifecycle --------------------------------------------------------------------
    def start_run(self, plan: Plan, run_id: str, params: dict[str, Any], dry: bool) -> RunState:
        now = self.clock()
        run = RunState(
            run_id=run_id, cuelist=plan.name, version=plan.version, dry=dry,
            params=params, created_at=now, started_at=now,
            cues={cue_id: CueRun() for cue_id in plan.order},
        )  # fmt: skip
        self.adopt(run, plan)
        self._event(run, "run", status=run.status.value)
        for cue_id in plan.order:
            self.evaluate(run, cue_id)
        self._check_done(run)
        return run

    def adopt(self, run: RunState, plan: Plan) -> None:
        """Take charge of a run (new, or loaded after a restart or a leader change)."""
        self.runs[run.run_id] = run
        self.plans[run.run_id] = plan
        self._dirty(run)
        for cue_id, cr in run.cues.items():
            if cr.deadline is not None and cr.deadline_phase is not None:
                self.out.timers.append(
                    Timer(cr.deadline, run.run_id, cue_id, cr.attempt, cr.deadline_phase.value)
                )

    def cancel(self, run_id: str, reason: str = "cancelled by operator") -> RunState:
        run = self._run(run_id)
        if run.status.done:
            raise Conflict(f"run {run_id} is already {run.status.value}")
        for cue_id, cr in run.cues.items():
            if not cr.state.done:
                self._stand_down(run, cue_id, reason)
                self._set(run, cue_id, CueState.CANCELLED, reason)
        self._release_run(run)
        self._finish(run, RunStatus.CANCELLED)
        return run

    def abort(self, run_id: str, reason: str) -> RunState:
        """Fail every cue not yet done (e.g. Redis lost the run's state); the run ends."""
        run = self._run(run_id)
        for cue_id, cr in run.cues.items():
            if not cr.state.done:
                self._stand_down(run, cue_id, reason)
                self._clear_deadline(cr)
                cr.error, cr.completed_at = reason, self.clock()
                self._set(run, cue_id, CueState.FAILED, f"failed: {reason}")
        run.record.errors.append(reason)
        self._release_run(run)
        self._check_done(run)
        return run

    def _check_done(self, run: RunState) -> None:
        if run.status.done or not all(cr.state.done for cr in run.cues.values()):
            return
        states = [cr.state for cr in run.cues.values()]
        completed = states.count(CueState.COMPLETED)
        if run.dry:
            status = RunStatus.DRY
        elif completed == len(states):
            status = RunStatus.SUCCESS
        elif completed:
            status = RunStatus.PARTIAL
        else:
            status = RunStatus.FAILED
        self._finish(run, status)

    def _finish(self, run: RunState, status: RunStatus) -> None:
        run.status = status
        run.completed_at = self.clock()
        self._dirty(run)
        self.out.finished.add(run.run_id)
        self._event(run, "run", status=status.value)

    # -- firing -------------------------------------------------------------------------
    def evaluate(self, run: RunState, cue_id: str) -> None:
        """Move a cue that is not yet called as far as its predecessors and flags allow."""
        if run.status.done:
            return
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        early = cr.state is CueState.WARNING and cr.early
        if cr.state not in (CueState.PENDING, CueState.WAITING, CueState.ARMED) and not early:
            return
        root = self._block_root(run, cue_id)
        if root is not None:
            if early:
                self._stand_down(run, cue_id, f"predecessor {root} did not complete")
            self._set(run, cue_id, CueState.BLOCKED, f"blocked: {root} failed", root=root)
            cr.completed_at = self.clock()
            self._after_done(run, cue_id)
            return
        waits = [d for d in plan.preds[cue_id] if not self._satisfied(run, d)]
        flags = [c for c in cue.conditions if c not in run.conditions]
        if waits or flags:
            if not early:
                self._set(run, cue_id, CueState.WAITING, _waiting_reason(waits, flags))
            return
        if early:  # the predecessor it was warned for has completed
            cr.early = False
            if all(s is TargetState.PREPARED for s in cr.targets.values()):
                self._to_standby(run, cue_id)
            return
        if cr.state is CueState.ARMED:
            return
        trigger = self._trigger(run, cue_id)
        if trigger is None:
            self._set(run, cue_id, CueState.ARMED, "armed: standing by for an operator GO")
            return
        self.fire(run, cue_id, trigger)

    def _trigger(self, run: RunState, cue_id: str) -> FiredBy | None:
        plan = self.plans[run.run_id]
        cue = plan.cues[cue_id]
        if cue.manual:
            return None
        if cue_id in plan.entries:
            return FiredBy.RUN_START
        if any(run.cues[d].state is CueState.COMPLETED for d in plan.auto_followed_by(cue_id)):
            return FiredBy.AUTO_FOLLOW
        if cue.depends_on:
            return FiredBy.DEPENDENCIES
        return None

    def _satisfied(self, run: RunState, pred: str) -> bool:
        cr = run.cues[pred]
        if cr.state is CueState.COMPLETED:
            return True
        on_failure = self.plans[run.run_id].cues[pred].on_failure
        return cr.state is CueState.FAILED and on_failure is OnFailure.CONTINUE

    def _block_root(self, run: RunState, cue_id: str) -> str | None:
        """The root-cause cue when a predecessor failed (block) or was blocked."""
        plan = self.plans[run.run_id]
        for d in plan.preds[cue_id]:
            cr = run.cues[d]
            if cr.state is CueState.BLOCKED:
                return cr.error or d
            if cr.state is CueState.CANCELLED:
                return d
            if cr.state is CueState.FAILED and plan.cues[d].on_failure is OnFailure.BLOCK:
                return d
        return None

    def operator_go(self, run_id: str, cue_id: str) -> CueRun:
        """POST .../cues/{cue}/go: fire an armed cue; Conflict (409) with the reason otherwise."""
        run = self._run(run_id)
        cr = self._cue(run, cue_id)
        if run.status.done:
            raise Conflict(f"run {run_id} is {run.status.value}")
        if cr.state is not CueState.ARMED:
            raise Conflict(f"cue {cue_id} is not armed: {cr.state.value}: {cr.reason or ''}")
        self.fire(run, cue_id, FiredBy.OPERATOR)
        return cr

    def raise_condition(self, run_id: str, name: str) -> RunState:
        run = self._run(run_id)
        if run.status.done:
            raise Conflict(f"run {run_id} is {run.status.value}")
        self._raise_flags(run, [name])
        return run

    def _raise_flags(self, run: RunState, names: list[str]) -> None:
        new = [n for n in names if n not in run.conditions]
        if not new:
            return
        run.conditions.extend(new)
        self._event(run, "condition", names=new)
        plan = self.plans[run.run_id]
        for cue_id in plan.order:
            if set(new) & set(plan.cues[cue_id].conditions):
                self.evaluate(run, cue_id)

    def fire(self, run: RunState, cue_id: str, by: FiredBy, early: bool = False) -> None:
        """Start a call of the cue: WARNING (cued) or task.assign (direct)."""
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        if cr.fired_by is None:
            run.record.fired.append(cue_id)
        cr.fired_by = by
        if cue.coordination is Coordination.DIRECT:
            if self._claim(run, cue_id):
                self._go(run, cue_id, assign=True)
            return
        cr.attempt += 1
        cr.early = early
        cr.warned_at = self.clock()
        cr.standby_at = cr.go_at = None
        cr.targets = {a: TargetState.WARNED for a in cue.target_agents}
        cr.not_ready = {}
        cr.handoff_ok = False
        reason = "early warning: preparing while a predecessor runs" if early else None
        self._set(run, cue_id, CueState.WARNING, reason or _missing(T.ACK_WARNING, cr))
        self._deadline(run, cue_id, Phase.WARNING, cue.ack_timeout_s)
        payload = p.CoordWarning(
            cue_id=cue_id, cue_group=cue.group or plan.name, target_agents=list(cue.target_agents),
            preparation_required=list(cue.preparation_required), attempt=cr.attempt,
            action=dict(cue.action),
        )  # fmt: skip
        self._send_all(run, cue_id, T.COORD_WARNING, payload)

    # -- the call -------------------------------------------------------------------------
    def _to_standby(self, run: RunState, cue_id: str) -> None:
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        if not self._claim(run, cue_id):
            return
        cr.standby_at = self.clock()
        self._set(run, cue_id, CueState.STANDBY, _missing(T.ACK_STANDBY, cr))
        self._deadline(run, cue_id, Phase.STANDBY, cue.standby_timeout_s)
        payload = p.CoordStandby(
            cue_id=cue_id, target_agents=list(cue.target_agents),
            ready_check=list(cue.ready_check), attempt=cr.attempt,
        )  # fmt: skip
        self._send_all(run, cue_id, T.COORD_STANDBY, payload)

    def _go(self, run: RunState, cue_id: str, assign: bool = False) -> None:
        """GO: one recorded event per attempt, sent to every target in one write."""
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        if self.paused is not None:
            self._hold(run, cue_id, f"GO paused: {self.paused}")
            return
        if assign:
            cr.attempt += 1
            cr.targets = {a: TargetState.READY for a in cue.target_agents}
        if any(g["attempt"] == cr.attempt for g in cr.gos):
            return  # GO is idempotent per cue and attempt
        now = self.clock()
        by = cr.fired_by or FiredBy.DEPENDENCIES
        cr.gos.append({"attempt": cr.attempt, "fired_by": by.value, "at": now})
        cr.go_at = now
        context: dict[str, Any] = {}
        for agent in cue.target_agents:
            context.update(run.handoffs.pop(agent, {}))
        cr.go_context = context
        self._set(run, cue_id, CueState.GO, _missing(T.STATUS_COMPLETED, cr))
        self._deadline(run, cue_id, Phase.GO, cue.go_timeout_s)
        self.book.mark_go((run.run_id, cue_id))
        self.out.resources_changed = True
        self._event(run, "go", cue=cue_id, attempt=cr.attempt, fired_by=by.value)
        if assign:
            payload: p.Payload = p.TaskAssign(
                cue_id=cue_id, attempt=cr.attempt, action=dict(cue.action), context=context
            )
            self._send_all(run, cue_id, T.TASK_ASSIGN, payload)
        else:
            payload = p.CoordGo(
                cue_id=cue_id, target_agents=list(cue.target_agents), attempt=cr.attempt,
                action=dict(cue.action), context=context, fired_by=by,
            )  # fmt: skip
            self._send_all(run, cue_id, T.COORD_GO, payload)
        self._warn_successors_early(run, cue_id)

    def _warn_successors_early(self, run: RunState, cue_id: str) -> None:
        """Warn a successor whose last unfinished predecessor has just been GO'd."""
        if not self.early_warning:
            return
        plan = self.plans[run.run_id]
        for succ in plan.succs[cue_id]:
            scr, scue = run.cues[succ], plan.cues[succ]
            if scr.state not in (CueState.PENDING, CueState.WAITING):
                continue
            if scue.coordination is Coordination.DIRECT or scue.manual:
                continue
            others = [d for d in plan.preds[succ] if d != cue_id]
            if not all(self._satisfied(run, d) for d in others):
                continue
            if any(c not in run.conditions for c in scue.conditions):
                continue
            trigger = FiredBy.AUTO_FOLLOW if plan.followed_by.get(cue_id) == succ else None
            trigger = trigger or self._trigger_when_done(run, succ)
            if trigger is not None:
                self.fire(run, succ, trigger, early=True)

    def _trigger_when_done(self, run: RunState, cue_id: str) -> FiredBy | None:
        plan = self.plans[run.run_id]
        if plan.auto_followed_by(cue_id):
            return FiredBy.AUTO_FOLLOW
        return FiredBy.DEPENDENCIES if plan.cues[cue_id].depends_on else None

    def complete(self, run: RunState, cue_id: str) -> None:
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        cr.completed_at = self.clock()
        self._clear_deadline(cr)
        self._set(run, cue_id, CueState.COMPLETED, None)
        self._release(run, cue_id)
        self._raise_flags(run, list(cue.raises))
        self._after_done(run, cue_id)

    def fail_attempt(self, run: RunState, cue_id: str, error: str) -> None:
        """The current attempt failed: retry the three phases, or fail the cue."""
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        self._clear_deadline(cr)
        self._release(run, cue_id)
        cr.error = error
        self._event(run, "attempt_failed", cue=cue_id, attempt=cr.attempt, error=error)
        if cr.retries_used < cue.retries:
            cr.retries_used += 1
            self.fire(run, cue_id, cr.fired_by or FiredBy.DEPENDENCIES)
            return
        cr.completed_at = self.clock()
        self._set(run, cue_id, CueState.FAILED, f"failed: {error}")
        run.record.errors.append(f"{cue_id}: {error}")
        self._after_done(run, cue_id)

    def _after_done(self, run: RunState, cue_id: str) -> None:
        for succ in self.plans[run.run_id].succs[cue_id]:
            self.evaluate(run, succ)
        self._check_done(run)

    # -- resources ------------------------------------------------------------------------
    def _claim(self, run: RunState, cue_id: str) -> bool:
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        if not cue.resources:
            return True
        strategy = ConflictStrategy(plan.strategy)
        claim = Claim(
            run.run_id, cue_id, tuple(cue.resources), cue.priority, strategy,
            agents=tuple(cue.target_agents),
        )  # fmt: skip
        outcome = self.book.claim(claim)
        self.out.resources_changed = True
        if outcome.granted:
            cr.holds = list(cue.resources)
            return True
        names = ", ".join(f"{h.run_id}/{h.cue_id}" for h in outcome.blocked_by) or "a waiter ahead"
        res = ", ".join(cue.resources)
        self._set(run, cue_id, cr.state, f"waiting for resource {res} held by {names}")
        self._clear_deadline(cr)
        run.record.waits.append(f"{cue_id}: resource {res} held by {names}")
        for victim in outcome.preempt:
            self._preempt(victim, by=claim)
        if outcome.arbitrate:
            self._open_conflict(run, cue_id, claim, outcome.blocked_by)
        if outcome.preempt:
            self._retry_waiters([claim])
        return False

    def _preempt(self, victim: Claim, by: Claim) -> None:
        """Priority: a lower cue not yet GO'd is stood down and re-queued."""
        run = self.runs.get(victim.run_id)
        if run is None:
            self.book.release(victim.holder)
            return
        cue_id = victim.cue_id
        why = f"stood down for higher-priority {by.run_id}/{by.cue_id}"
        run.record.conflicts.append(f"{cue_id}: {why}")
        self._stand_down(run, cue_id, why)
        self._clear_deadline(run.cues[cue_id])
        self.book.release(victim.holder)
        run.cues[cue_id].holds = []
        self.book.waiting[victim.holder] = victim  # re-queued behind the winner
        self._set(run, cue_id, CueState.WAITING, f"re-queued: {why}")

    def _release(self, run: RunState, cue_id: str) -> None:
        cr = run.cues[cue_id]
        if not cr.holds and (run.run_id, cue_id) not in self.book.waiting:
            return
        cr.holds = []
        self.out.resources_changed = True
        self._retry_waiters(self.book.release((run.run_id, cue_id)))

    def _release_run(self, run: RunState) -> None:
        self.out.resources_changed = True
        self._retry_waiters(self.book.forget_run(run.run_id))

    def _retry_waiters(self, waiters: list[Claim]) -> None:
        for claim in waiters:
            run = self.runs.get(claim.run_id)
            if run is None or run.status.done:
                self.book.waiting.pop(claim.holder, None)
                continue
            cr = run.cues[claim.cue_id]
            if cr.state is CueState.WAITING and cr.fired_by is not None:
                self.fire(run, claim.cue_id, cr.fired_by)  # re-queued: call it again
            elif cr.state is CueState.WARNING and _all(cr, TargetState.PREPARED):
                self._to_standby(run, claim.cue_id)
            elif cr.state in (CueState.PENDING, CueState.WAITING):
                self.evaluate(run, claim.cue_id)

    def _open_conflict(self, run: RunState, cue_id: str, claim: Claim, held: list[Claim]) -> None:
        plan = self.plans[run.run_id]
        rivals = [claim, *held]
        winner = max(rivals, key=lambda c: (c.priority, -c.seq))
        agents = sorted({a for c in rivals for a in c.agents})
        payload = p.EscalationConflict(
            severity=Severity.MEDIUM, cause=f"conflict:{','.join(claim.resources)}",
            detail=f"{cue_id} wants {', '.join(claim.resources)} held by "
            + ", ".join(f"{c.run_id}/{c.cue_id}" for c in held),
            agents_involved=agents, conflict_type=ConflictType.RESOURCE,
            resource_in_question=", ".join(claim.resources), proposed_resolution="arbitration",
            suggested_winner=winner.agents[0] if winner.agents else None,
            cues_involved=[f"{c.run_id}/{c.cue_id}" for c in rivals],
        )  # fmt: skip
        esc = self.escalate(run, cue_id, T.ESCALATION_CONFLICT, payload)
        esc.payload["suggested_winner_cue"] = f"{winner.run_id}/{winner.cue_id}"
        timeout = float(getattr(plan.cuelist, "arbitration_timeout_s", 30.0))
        at = self.clock() + timeout
        self.out.timers.append(Timer(at, run.run_id, cue_id, run.cues[cue_id].attempt, ARBITRATION))

    def resolve(self, esc_id: str, winner: str | None, note: str = "") -> Escalation:
        """A binding operator decision; for a conflict `winner` is `run/cue` or a cue id."""
        esc = self.escalations.get(esc_id)
        if esc is None:
            raise NotFound(f"no open escalation {esc_id}")
        if esc.status == "resolved":
            raise Conflict(f"escalation {esc_id} is already resolved")
        esc.status = "resolved"
        esc.resolution = {"winner": winner, "note": note, "at": self.clock()}
        esc.updated_at = self.clock()
        self.out.escalations[esc.id] = esc
        if esc.type is T.ESCALATION_CONFLICT and winner:
            self._apply_arbitration(esc, winner)
        if self.paused and esc.severity is Severity.CRITICAL:
            self.resume(f"escalation {esc_id} resolved")
        return esc

    def _apply_arbitration(self, esc: Escalation, winner: str) -> None:
        holder = _holder(winner, esc.run_id)
        rivals = [_holder(c, esc.run_id) for c in esc.payload.get("cues_involved", [])]
        if holder not in rivals:
            raise Conflict(f"{winner} is not one of {', '.join('/'.join(r) for r in rivals)}")
        claim = self.book.waiting.get(holder)
        for r in claim.resources if claim else ():
            self.book.prefer(r, holder)
            current = self.book.holder_of(r)
            if current is not None and current.holder != holder and not current.went:
                self._preempt(current, by=claim)  # type: ignore[arg-type]
        if claim is not None:
            self._retry_waiters([claim])

    def arbitration_timeout(self, run: RunState, cue_id: str) -> None:
        """No decision in time: fall back to priority."""
        claim = self.book.waiting.get((run.run_id, cue_id))
        if claim is None:
            return
        claim.strategy = ConflictStrategy.PRIORITY
        run.record.conflicts.append(f"{cue_id}: arbitration timed out, priority decides")
        outcome_claim = self.book.waiting.pop(claim.holder)
        if self._claim_again(run, outcome_claim):
            self._retry_waiters([outcome_claim])

    def _claim_again(self, run: RunState, claim: Claim) -> bool:
        outcome = self.book.claim(claim)
        for victim in outcome.preempt:
            self._preempt(victim, by=claim)
        return outcome.granted or bool(outcome.preempt)

    # -- helpers --------------------------------------------------------------------------
    def escalate(self, run: RunState | None, cue_id: str | None, mt: T, payload: Any) -> Escalation:
        """Raise an escalation once per (run, cue, cause); later ones are counted on it."""
        now = self.clock()
        esc = Escalation(
            type=mt, severity=payload.severity, run_id=run.run_id if run else None,
            cue_id=cue_id, cause=payload.cause or mt.value, detail=payload.detail,
            payload=payload.model_dump(mode="json"), created_at=now, updated_at=now,
        )  # fmt: skip
        esc, new = self.escalations.raise_(esc)
        self.out.escalations[esc.id] = esc
        if run is not None:
            if new:
                run.record.escalations.append(esc.id)
            self._event(run, "escalation", id=esc.id, type=mt.value, severity=esc.severity.value)
        if new and esc.severity in (Severity.HIGH, Severity.CRITICAL):
            text = f"{esc.severity.value} {mt.value}: {esc.detail or esc.cause}"
            self._broadcast(T.BROADCAST_NOTICE, p.BroadcastNotice(text=text, severity=esc.severity))
        if new and esc.severity is Severity.CRITICAL:
            self.pause(f"critical escalation {esc.id}")
        return esc

    def pause(self, reason: str) -> None:
        if self.paused is None:
            self.paused = reason
            self.out.paused_changed = True
            self._broadcast(T.BROADCAST_PAUSE, p.BroadcastPause(reason=reason))

    def resume(self, reason: str) -> None:
        if self.paused is None:
            return
        self.paused = None
        self.out.paused_changed = True
        self._broadcast(T.BROADCAST_RESUME, p.BroadcastResume(reason=reason))
        for run in list(self.runs.values()):
            if run.status is RunStatus.HOLDING:
                run.status, run.hold_reason = RunStatus.RUNNING, None
                self._event(run, "run", status=run.status.value)
            for cue_id, cr in run.cues.items():
                if cr.state is CueState.STANDBY and _all(cr, TargetState.READY):
                    self._go(run, cue_id)

    def _hold(self, run: RunState, cue_id: str, reason: str) -> None:
        run.cues[cue_id].reason = reason
        if run.status is RunStatus.RUNNING:
            run.status, run.hold_reason = RunStatus.HOLDING, reason
            self._event(run, "run", status=run.status.value, reason=reason)
        self._dirty(run)

    def _broadcast(self, mt: T, payload: p.Payload) -> None:
        self.out.messages.append((self.keys.broadcast, make(mt, payload)))

    def _send_all(self, run: RunState, cue_id: str, mt: T, payload: p.Payload) -> None:
        targets = tuple(self.plans[run.run_id].cues[cue_id].target_agents)
        for agent in targets:
            msg = make(mt, payload, target_agents=targets, run_id=run.run_id, cue_id=cue_id)
            self.out.messages.append((self.keys.inbox(agent), msg))
        run.record.messages_out += len(targets)

    def _stand_down(self, run: RunState, cue_id: str, reason: str) -> None:
        cr = run.cues[cue_id]
        if cr.state not in ACTIVE:
            return
        payload = p.CoordStanddown(cue_id=cue_id, attempt=max(cr.attempt, 1), reason=reason)
        self._send_all(run, cue_id, T.COORD_STANDDOWN, payload)
        cr.targets = {a: TargetState.STOOD_DOWN for a in cr.targets}
        cr.early = False

    def _deadline(self, run: RunState, cue_id: str, phase: Phase, seconds: float) -> None:
        cr = run.cues[cue_id]
        cr.deadline, cr.deadline_phase = self.clock() + seconds, phase
        self.out.timers.append(Timer(cr.deadline, run.run_id, cue_id, cr.attempt, phase.value))

    @staticmethod
    def _clear_deadline(cr: CueRun) -> None:
        cr.deadline = cr.deadline_phase = None

    def _set(
        self, run: RunState, cue_id: str, state: CueState, reason: str | None, **extra: Any
    ) -> None:
        cr = run.cues[cue_id]
        changed = cr.state is not state
        cr.state, cr.reason = state, reason
        if "root" in extra:
            cr.error = extra["root"]
        self._dirty(run)
        if changed:
            self._event(
                run, "cue", cue=cue_id, state=state.value, reason=reason, attempt=cr.attempt
            )

    def _event(self, run: RunState, kind: str, **data: Any) -> None:
        self.out.events.append((run.run_id, {"type": kind, "at": self.clock(), **data}))

    def _dirty(self, run: RunState) -> None:
        self.out.dirty.add(run.run_id)

    def _run(self, run_id: str) -> RunState:
        run = self.runs.get(run_id)
        if run is None:
            raise NotFound(f"no active run {run_id}")
        return run

    def _cue(self, run: RunState, cue_id: str) -> CueRun:
        cr = run.cues.get(cue_id)
        if cr is None:
            raise NotFound(f"run {run.run_id} has no cue {cue_id}")
        return cr


def _all(cr: CueRun, state: TargetState) -> bool:
    return bool(cr.targets) and all(s is state for s in cr.targets.values())


def _missing(what: T, cr: CueRun) -> str:
    return f"waiting for {what.value} from {', '.join(sorted(cr.targets))}"


def _waiting_reason(preds: list[str], flags: list[str]) -> str:
    parts = []
    if preds:
        parts.append("predecessors " + ", ".join(preds))
    if flags:
        parts.append("conditions " + ", ".join(flags))
    return "waiting for " + " and ".join(parts)


def _holder(ref: str, default_run: str | None) -> tuple[str, str]:
    if "/" in ref:
        run_id, cue_id = ref.split("/", 1)
        return (run_id, cue_id)
    return (default_run or "", ref)
