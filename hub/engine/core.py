"""The cue state machine: firing, the WARNING/STANDBY/GO call, completion, failure.

Pure: no I/O. Every input mutates run state and appends to `self.out` (an Outbox) what
must be written and sent; the driver flushes the outbox in one fenced write, so a state
change and the messages it causes are recorded together or not at all.
"""

from __future__ import annotations

from typing import Any

from hub.engine.again import AgainMixin
from hub.engine.ahead import AheadMixin
from hub.engine.alerts import AlertsMixin
from hub.engine.base import ACTIVE, CHUNK, MOVING, _missing, _waiting_reason, named
from hub.engine.budgets import BudgetMixin
from hub.engine.contest import ContestMixin
from hub.engine.debugging import DebugMixin
from hub.engine.outbox import DEBUG, Timer
from hub.engine.plan import Plan
from hub.engine.state import CueRun, RunState
from hub.engine.targets import TargetsMixin
from protocols import payloads as p
from protocols.cuelist import Budget
from protocols.errors import Conflict
from protocols.messages import MessageType as T
from protocols.states import (
    Coordination,
    CueState,
    FiredBy,
    OnFailure,
    Phase,
    RunStatus,
    TargetState,
)


class Engine(
    AheadMixin, ContestMixin, AlertsMixin, AgainMixin, BudgetMixin, DebugMixin, TargetsMixin
):
    """Every active run on the leading hub, the resource book, and the escalation book."""

    # -- run lifecycle --------------------------------------------------------------------
    def start_run(
        self, plan: Plan, run_id: str, params: dict[str, Any], dry: bool, chunk: int | None = None,
        budget: dict[str, Any] | None = None,
    ) -> RunState:  # fmt: skip
        """Start a run: its cues are evaluated in declaration order, the first `chunk` now
        (all when None) and the rest by `work_backlog` in later steps, so a run of 10,000
        cues sends its first GOs at once and does not stall other runs while it starts.
        `budget` (the request's limits) is merged over the cuelist's `budget:`."""
        now = self.clock()
        limits = plan.cuelist.budget
        if budget:
            limits = (limits or Budget()).merged(budget)
        run = RunState(
            run_id=run_id, cuelist=plan.name, version=plan.version, dry=dry,
            params=params, created_at=now, started_at=now,
            cues={cue_id: CueRun() for cue_id in plan.order}, budget=limits,
        )  # fmt: skip
        self.adopt(run, plan, new=True)
        self.record_event(run, "run", status=run.status.value)
        self.work_backlog(chunk)
        return run

    def work_backlog(self, limit: int | None = None) -> bool:
        """Evaluate up to `limit` queued cues (all when None); True while more are queued."""
        touched: dict[str, RunState] = {}
        done = 0
        while self.backlog and (limit is None or done < limit):
            run_id, cue_id = self.backlog.popleft()
            run = self.runs.get(run_id)
            if run is None or run.cues[cue_id].state not in (CueState.PENDING, CueState.WAITING):
                continue  # ended, or moved on (something else evaluated it meanwhile)
            done += 1
            touched[run_id] = run
            self.evaluate(run, cue_id)
        for run in touched.values():
            self._check_done(run)
        return bool(self.backlog)

    def adopt(self, run: RunState, plan: Plan, new: bool = False) -> None:
        """Take charge of a run (new, or loaded after a restart or a leader change); its
        cues never evaluated (PENDING), and those waiting (a completion may have released
        them into a backlog that died with the last leader), join the backlog; the timers of
        its deadlines and open arbitrations are set again. The whole run is written again,
        except the untouched cues of a new one (a cue not stored reads back as PENDING)."""
        self.runs[run.run_id] = run
        self.plans[run.run_id] = plan
        self.open[run.run_id] = sum(not cr.state.done for cr in run.cues.values())
        self.moving[run.run_id] = sum(cr.state in MOVING for cr in run.cues.values())
        self.out.fresh.add(run.run_id)
        if new:
            self.out.started.add(run.run_id)
        self.mark_dirty(run)
        for cue_id, cr in run.cues.items():
            pending = cr.state is CueState.PENDING
            if pending or cr.state is CueState.WAITING:  # WAITING: maybe released, unseen
                self.backlog.append((run.run_id, cue_id))
            if not (new and pending):
                self.mark_dirty(run, cue_id)
            if cr.state in ACTIVE:
                self.track_engaged(run, cue_id)
            if cr.deadline is not None and cr.deadline_phase is not None:
                self.out.timers.append(
                    Timer(cr.deadline, run.run_id, cue_id, cr.attempt, cr.deadline_phase.value)
                )
            claim = self.book.waiting.get((run.run_id, cue_id))
            if claim is not None and claim.fallback_at is not None:  # an open arbitration
                self.arbitration_timer(run, cue_id, claim.fallback_at)
            if cr.debugger is not None and cr.debug_deadline is not None:
                self.out.timers.append(
                    Timer(cr.debug_deadline, run.run_id, cue_id, cr.attempt, DEBUG)
                )
        self.budget_timers(run)

    def cancel(self, run_id: str, reason: str = "cancelled by operator") -> RunState:
        run = self._run(run_id)
        if run.status.done:
            raise Conflict(f"run {run_id} is already {run.status.value}")
        for cue_id, cr in run.cues.items():
            if not cr.state.done:
                self.stand_down(run, cue_id, reason)
                self._set(run, cue_id, CueState.CANCELLED, reason)
        self._release_run(run)
        self._finish(run, RunStatus.CANCELLED)
        return run

    def abort(self, run_id: str, reason: str) -> RunState:
        """Fail every cue not yet done (e.g. Redis lost the run's state); the run ends."""
        run = self._run(run_id)
        for cue_id, cr in run.cues.items():
            if not cr.state.done:
                self.stand_down(run, cue_id, reason)
                self.clear_deadline(cr)
                cr.error, cr.completed_at = reason, self.clock()
                self._set(run, cue_id, CueState.FAILED, f"failed: {reason}")
        run.record.note("errors", reason)
        self._release_run(run)
        self._check_done(run)
        return run

    def _check_done(self, run: RunState) -> None:
        if run.status.done or self.open[run.run_id]:
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

    def forget(self, run_id: str) -> None:
        """Drop a finished run once its end is committed (not one an operator has reopened
        since: see `retry_cue`). One changed since that write started (a rerun's link,
        stepped while it was in flight) is dropped after the next write, which carries the
        change: dropped now, that write would pass over it."""
        run = self.runs.get(run_id)
        if run is not None and not run.status.done:
            return
        if run_id in self.out.dirty:
            self.out.finished.add(run_id)
            return
        self.note_ended([run_id])
        self.runs.pop(run_id, None)
        self.plans.pop(run_id, None)
        self.open.pop(run_id, None)
        self.moving.pop(run_id, None)
        self.escalations.forget_run(run_id)

    def _finish(self, run: RunState, status: RunStatus) -> None:
        run.status, run.hold_reason = status, None
        run.completed_at = self.clock()
        self.mark_dirty(run)
        self.out.finished.add(run.run_id)
        self.record_event(run, "run", status=status.value)

    # -- firing -------------------------------------------------------------------------
    def evaluate(self, run: RunState, cue_id: str) -> None:
        """Move a cue that is not yet called as far as its predecessors and flags allow."""
        if run.status.done:
            return
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        early = cr.state is CueState.WARNING and cr.early
        if cr.debugger is not None:
            return  # waiting for its debugger's diagnosis (hub.engine.debugging)
        if cr.state not in (CueState.PENDING, CueState.WAITING, CueState.ARMED) and not early:
            return
        if (
            cr.fired_by is not None
            and cr.state is CueState.WAITING
            and ((run.run_id, cue_id) in self.book.waiting)
        ):  # fired, and queued for a resource: fired again once it is free (retry_waiters)
            return
        if self.consult_held(run, cue_id):
            return  # its failure is its debugger's to diagnose first (asked now, or held)
        root = self._block_root(run, cue_id)
        if root is not None:
            if early:
                self.stand_down(run, cue_id, f"predecessor {root} did not complete")
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
            self.mark_dirty(run, cue_id)
            unprepared = [a for a, s in cr.targets.items() if s is not TargetState.PREPARED]
            if not unprepared:
                self.to_standby(run, cue_id)
            else:  # no longer early: it waits for its targets, not for the predecessor
                self.set_reason(run, cue_id, f"waiting for ack.warning from {named(unprepared)}")
            self.warn_ahead(run, cue_id)  # the next to GO now: closer, so may those after it
            return
        if cr.state is CueState.ARMED:
            return
        # a cue waiting for a matching agent keeps the trigger it fired with (an operator's)
        trigger = cr.awaiting or self._trigger(run, cue_id)
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
        # a predecessor that failed under `on_failure: continue` lets it go as a completed
        # one would (as `_trigger_when_done` expects of a cue warned early)
        if any(self._satisfied(run, d) for d in plan.auto_followed_by(cue_id)):
            return FiredBy.AUTO_FOLLOW
        if cue.depends_on:
            return FiredBy.DEPENDENCIES
        return None

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
            why = f": {cr.reason}" if cr.reason else ""
            raise Conflict(f"cue {cue_id} is not armed: it is {cr.state.value}{why}")
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
        self.record_event(run, "condition", names=new)
        plan = self.plans[run.run_id]
        for cue_id in plan.order:
            if set(new) & set(plan.cues[cue_id].conditions):
                self.evaluate(run, cue_id)

    def fire(self, run: RunState, cue_id: str, by: FiredBy, early: bool = False) -> None:
        """Start a call of the cue: WARNING (cued) or task.assign (direct). A cue with a
        `target` is resolved first; with no match it waits (an early warning just waits for
        its predecessor instead)."""
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        if not self.resolve_targets(run, cue_id, by, quiet=early):
            return
        if cr.fired_by is None:
            run.fired_count += 1
            cr.fired_seq = run.fired_count
        cr.fired_by = by
        if cue.coordination is Coordination.DIRECT:
            if self._claim(run, cue_id):
                self.go(run, cue_id, assign=True)
            else:  # queued, from whatever state it was called in (armed: an operator's GO;
                # go or failed: a retry): fired again by `retry_waiters` once it is free
                self._set(run, cue_id, CueState.WAITING, cr.reason)
            return
        cr.attempt += 1
        # a new attempt of a cue warned early (a retry) is early still: no STANDBY before
        # its predecessors are done
        cr.early = early or self._unfinished(run, cue_id)
        cr.warned_at = self.clock()
        cr.standby_at = cr.go_at = None
        targets = self.targets_of(run, cue_id)
        cr.targets = {a: TargetState.WARNED for a in targets}
        if cr.state in ACTIVE:  # a retry in the call still: its load moves to the new targets
            self.track_engaged(run, cue_id)
        cr.not_ready = {}
        cr.dead_replies = {}
        cr.clear_results()
        cr.handoff_ok = False
        reason = "early warning: preparing while a predecessor runs" if cr.early else None
        self._set(run, cue_id, CueState.WARNING, reason or _missing(T.ACK_WARNING, cr))
        self._deadline(run, cue_id, Phase.WARNING, cue.ack_timeout_s)
        payload = p.CoordWarning(
            cue_id=cue_id, cue_group=cue.group or plan.name, target_agents=list(targets),
            preparation_required=list(cue.preparation_required), attempt=cr.attempt,
            action=self.action_of(run, cue_id),
        )  # fmt: skip
        self._send_all(run, cue_id, T.COORD_WARNING, payload)
        if not early:  # an early one is warned by a walk of warn_ahead, which goes on
            self.warn_ahead(run, cue_id)

    # -- the call -------------------------------------------------------------------------
    def to_standby(self, run: RunState, cue_id: str) -> None:
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        if self._unfinished(run, cue_id):  # a predecessor runs again (an operator's retry)
            self._prepared_early(run, cue_id)
            return
        if not self._claim(run, cue_id):
            return
        cr.standby_at = self.clock()
        self._set(run, cue_id, CueState.STANDBY, _missing(T.ACK_STANDBY, cr))
        self._deadline(run, cue_id, Phase.STANDBY, cue.standby_timeout_s)
        payload = p.CoordStandby(
            cue_id=cue_id, target_agents=list(self.targets_of(run, cue_id)),
            ready_check=list(cue.ready_check), attempt=cr.attempt,
        )  # fmt: skip
        self._send_all(run, cue_id, T.COORD_STANDBY, payload)

    def _prepared_early(self, run: RunState, cue_id: str) -> None:
        """No STANDBY before every predecessor completes: the cue is as one warned early,
        which `evaluate` sends on once they are done; out of the resource queue meanwhile,
        so a resource it cannot use yet stays free for others."""
        run.cues[cue_id].early = True
        if self.book.waiting.pop((run.run_id, cue_id), None) is not None:
            self.out.resources_changed = True
        self.set_reason(run, cue_id, "prepared: waiting for its predecessor to complete")

    def go(self, run: RunState, cue_id: str, assign: bool = False) -> None:
        """GO: one recorded event per attempt, sent to every target in one write."""
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        if self.paused is not None:
            # it waits for the operator, not for its targets: ready, it may not time out
            self.clear_deadline(cr)
            self._hold(run, cue_id, self.paused)
            return
        if self.hold_for_budget(run, cue_id):
            return  # a spent budget: no new GO until the operator raises it
        if assign:  # a new attempt, as fire() starts a cued one
            cr.attempt += 1
            cr.targets = {a: TargetState.READY for a in self.targets_of(run, cue_id)}
            if cr.state in ACTIVE:  # a retry in the call still (GO again): see fire()
                self.track_engaged(run, cue_id)
            cr.not_ready = {}
            cr.dead_replies = {}
            cr.clear_results()
            cr.handoff_ok = False  # the attempt before's handoff is not this one's
        if any(g["attempt"] == cr.attempt for g in cr.gos):
            return  # GO is idempotent per cue and attempt
        now = self.clock()
        by = cr.fired_by or FiredBy.DEPENDENCIES
        cr.gos.append({"attempt": cr.attempt, "fired_by": by.value, "at": now})
        cr.go_at = now
        context: dict[str, Any] = {}
        for agent in self.targets_of(run, cue_id):
            context.update(self.give_handoff(run, agent))
        cr.go_context = context
        self._set(run, cue_id, CueState.GO, _missing(T.STATUS_COMPLETED, cr))
        self._deadline(run, cue_id, Phase.GO, cue.go_timeout_s)
        if self.book.mark_go((run.run_id, cue_id)):
            self.out.resources_changed = True
        self.record_event(run, "go", cue=cue_id, attempt=cr.attempt, fired_by=by.value)
        if assign:
            payload: p.Payload = p.TaskAssign(
                cue_id=cue_id, attempt=cr.attempt, action=self.action_of(run, cue_id),
                context=context, description=cue.description,
            )  # fmt: skip
            self._send_all(run, cue_id, T.TASK_ASSIGN, payload)
        else:
            payload = p.CoordGo(
                cue_id=cue_id, target_agents=list(self.targets_of(run, cue_id)),
                attempt=cr.attempt, action=self.action_of(run, cue_id), context=context,
                fired_by=by,
                description=cue.description,
            )  # fmt: skip
            self._send_all(run, cue_id, T.COORD_GO, payload)
        self.warn_ahead(run, cue_id)

    def complete(self, run: RunState, cue_id: str) -> None:
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        cr.completed_at = self.clock()
        self.clear_deadline(cr)
        self._set(run, cue_id, CueState.COMPLETED, None, result=cr.result)
        self._release(run, cue_id)
        self._raise_flags(run, list(cue.raises))
        self._after_done(run, cue_id)

    def fail_attempt(self, run: RunState, cue_id: str, error: str, retry: bool = True) -> None:
        """The current attempt failed: retry the three phases (unless `retry` is False),
        ask the cue's debugger (on_repeated_failure), or fail the cue."""
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        self.clear_deadline(cr)
        self._release(run, cue_id)
        cr.error = error
        self.record_event(run, "attempt_failed", cue=cue_id, attempt=cr.attempt, error=error)
        if retry and cue.on_repeated_failure is not None:
            self.after_failed_attempt(run, cue_id, error)
            return
        if retry and cr.retries_used < cue.retries:
            cr.retries_used += 1
            self.fire(run, cue_id, cr.fired_by or FiredBy.DEPENDENCIES)
            return
        self.fail_cue(run, cue_id, error)

    def fail_cue(self, run: RunState, cue_id: str, error: str) -> None:
        """The cue has failed (no attempt left): its dependents are evaluated."""
        cr = run.cues[cue_id]
        cr.error = error
        cr.completed_at = self.clock()
        self._set(run, cue_id, CueState.FAILED, f"failed: {error}")
        run.record.note("errors", f"{cue_id}: {error}")
        self._after_done(run, cue_id)

    def _after_done(self, run: RunState, cue_id: str) -> None:
        """Evaluate the successors: CHUNK of them now, the rest in later steps (backlog)."""
        succs = self.plans[run.run_id].succs[cue_id]
        for succ in succs[:CHUNK]:
            self.evaluate(run, succ)
        self.backlog.extend((run.run_id, succ) for succ in succs[CHUNK:])
        self._check_done(run)
