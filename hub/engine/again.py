"""Trying again: an operator's retry of a failed or blocked cue, and a rerun of a run.

A retry is a new attempt of the cue (fired by the operator, its automatic retries
counted afresh); the cues it blocked wait again and go on once it completes. A run that
had ended failed or partial is running again: the leader loads it back from Redis
(`loaded`), and its keys are kept (`Outbox.reopened`). A rerun is a new run of the same
version that links to its source both ways (`rerun_of`, `reruns`); `from_failure` treats
the cues that completed as completed, with their results, the flags they raised, their
context entries and the handoff context their successors were given.
"""

from __future__ import annotations

from typing import Any

from hub.engine.base import EngineBase
from hub.engine.plan import Plan
from hub.engine.state import CueRun, RunState
from protocols.errors import Conflict, NotFound
from protocols.states import CueState, FiredBy, RunStatus

RERUNS_MAX = 100  # rerun ids a run's record keeps (the most recent)


class AgainMixin(EngineBase):
    """The engine's part that retries cues and reruns runs."""

    def retry_cue(
        self, run_id: str, cue_id: str, loaded: tuple[RunState, Plan] | None = None
    ) -> tuple[CueRun, str]:
        """Retry a failed cue, or the failed cue a blocked one waits on; returns the cue
        asked about and the one retried. Conflict (409) when neither applies."""
        run = self.runs.get(run_id) or (loaded[0] if loaded else None)
        if run is None:
            raise NotFound(f"no run {run_id}")
        cr = self._cue(run, cue_id)
        if run.status in (RunStatus.CANCELLED, RunStatus.DRY):
            raise Conflict(f"run {run_id} is {run.status.value}: start a new one (rerun)")
        if cr.state not in (CueState.FAILED, CueState.BLOCKED):
            why = f": {cr.reason}" if cr.reason else ""
            raise Conflict(f"cue {cue_id} is not failed or blocked: it is {cr.state.value}{why}")
        target = cue_id
        if cr.state is CueState.BLOCKED:
            target = cr.error or ""
            root = run.cues.get(target)
            if root is None or root.state is not CueState.FAILED:
                raise Conflict(f"cue {cue_id} is blocked by {target or '?'}, which did not fail")
        held = run.run_id in self.runs
        if not held:
            assert loaded is not None
            self.adopt(run, loaded[1])  # with its wall_s timers
        if run.status.done:
            self._reopen(run, f"retry of {target}", timers=held)
        self._retry(run, target)
        return cr, target

    def _reopen(self, run: RunState, why: str, *, timers: bool) -> None:
        """A run that had ended (failed, partial) is running again. With `timers`, its
        wall_s timers are set again: the driver sweeps out those of an ended run it still
        held (see Driver._sweep_timers)."""
        run.status, run.completed_at, run.hold_reason = RunStatus.RUNNING, None, None
        if timers:
            self.budget_timers(run)
        self.out.reopened.add(run.run_id)
        self.mark_dirty(run)
        self.record_event(run, "run", status=run.status.value, reason=why)

    def _retry(self, run: RunState, cue_id: str) -> None:
        plan = self.plans[run.run_id]
        blocked, seen, todo = [], {cue_id}, list(plan.succs[cue_id])
        while todo:  # every cue downstream that is blocked, whatever it was blocked by
            succ = todo.pop()
            if succ in seen:
                continue
            seen.add(succ)
            if run.cues[succ].state is CueState.BLOCKED:
                blocked.append(succ)
                todo.extend(plan.succs[succ])
        for succ in blocked:
            scr = run.cues[succ]
            scr.error = scr.completed_at = None
            self._set(run, succ, CueState.WAITING, f"unblocked: {cue_id} is tried again")
        cr = run.cues[cue_id]
        cr.retries_used, cr.completed_at = 0, None
        cr.failures_in_row, cr.streak, cr.consults = 0, [], 0  # a new streak, a new debugger
        self.record_event(run, "retry", cue=cue_id, attempt=cr.attempt + 1)
        self.fire(run, cue_id, FiredBy.OPERATOR)
        for succ in (c for c in plan.order if c in blocked):
            self.evaluate(run, succ)  # waits again (or is blocked by another failure)

    def rerun(
        self, source_id: str, plan: Plan, run_id: str, *, from_failure: bool = False,
        loaded: RunState | None = None, context: dict[str, dict[str, Any]] | None = None,
        chunk: int | None = None,
    ) -> RunState:  # fmt: skip
        """A new run `run_id` of the source run's version (`plan`), linked both ways;
        `context` is the source's shared context (carried with `from_failure`)."""
        source = self.runs.get(source_id) or loaded
        if source is None:
            raise NotFound(f"no run {source_id}")
        if source.dry:
            raise Conflict(f"run {source_id} is a dry run: start a new one")
        done = CueState.COMPLETED
        carried = {c: cr for c, cr in source.cues.items() if from_failure and cr.state is done}
        now = self.clock()
        run = RunState(
            run_id=run_id, cuelist=plan.name, version=plan.version, params=dict(source.params),
            created_at=now, started_at=now, rerun_of=source_id, budget=source.budget,
            cues={c: _carried(carried[c], source_id) if c in carried else CueRun()
                  for c in plan.order},
        )  # fmt: skip
        if carried:
            _carry_over(run, source, plan, carried, context or {})
        self.adopt(run, plan, new=True)
        for key in run.context_owners:  # written with this step
            entry = (context or {})[key]
            self.out.context.append((run_id, key, entry))
            self.out.owners.append((run_id, key))
        self.record_event(
            run, "run", status=run.status.value, rerun_of=source_id, carried=sorted(carried)
        )
        for cue_id, cr in run.cues.items():
            if cue_id in carried:
                self.record_event(run, "cue", cue=cue_id, state=cr.state, reason=cr.reason,
                                  attempt=cr.attempt, result=cr.result)  # fmt: skip
        self._link(source, plan, run_id)
        self.work_backlog(chunk)
        return run

    def _link(self, source: RunState, plan: Plan, run_id: str) -> None:
        """The source run names its rerun. One that ended is taken in for this write and
        forgotten again after it (unless a retry in the meantime runs it again)."""
        source.reruns = [*source.reruns, run_id][-RERUNS_MAX:]
        if source.run_id not in self.runs:
            self.adopt(source, plan)
            self.out.finished.add(source.run_id)
        self.mark_dirty(source)
        self.record_event(source, "rerun", run_id=run_id)


def _carried(cr: CueRun, source_id: str) -> CueRun:
    """A cue completed in the source run, as the rerun shows it: completed, as it was."""
    return cr.model_copy(
        update={"reason": f"completed in run {source_id}", "deadline": None,
                "deadline_phase": None, "holds": [], "dead_replies": {}},
        deep=True,
    )  # fmt: skip


def _carry_over(
    run: RunState, source: RunState, plan: Plan, carried: dict[str, CueRun],
    context: dict[str, dict[str, Any]],
) -> None:  # fmt: skip
    """What the completed cues left for the rest: the flags they raised, their context
    entries (and owners), the handoff context not yet given, and the handoff context each
    cue not carried was given last time (its sender is not called again)."""
    raised = {flag for c in carried for flag in plan.cues[c].raises}
    run.conditions = [flag for flag in source.conditions if flag in raised]
    run.fired_count = max((cr.fired_seq or 0 for cr in carried.values()), default=0)
    handoffs = {agent: dict(ctx) for agent, ctx in source.handoffs.items()}
    for cue_id, cr in source.cues.items():
        if cue_id not in carried and cr.go_context:
            for agent in cr.assigned or cr.resolved or plan.cues[cue_id].fixed_agents:
                handoffs.setdefault(agent, {}).update(cr.go_context)
    run.handoffs = handoffs
    for key, entry in context.items():
        if entry.get("cue_id") in (None, *carried) and entry.get("source"):
            run.context_owners[key] = str(entry["source"])
