"""Run state as the API shows it: RFC 3339 UTC times, null for what has not happened."""

from __future__ import annotations

import time

from hub.api.schemas import CuePublic, RunPublic, RunRecordPublic, RunSummary, UsagePublic, ts
from hub.engine.state import QUEUED, CueRun, RunState
from protocols.states import CueState


def cue_public(cr: CueRun) -> CuePublic:
    return CuePublic(
        state=cr.state.value, attempt=cr.attempt, retries_used=cr.retries_used,
        reason=QUEUED if cr.reason is None and cr.state is CueState.PENDING else cr.reason,
        fired_by=cr.fired_by.value if cr.fired_by else None,
        go_by=cr.go_by.value if cr.go_by else None,
        warned_at=ts(cr.warned_at), standby_at=ts(cr.standby_at), go_at=ts(cr.go_at),
        completed_at=ts(cr.completed_at),
        targets={agent: state.value for agent, state in cr.targets.items()},
        target=cr.target, resolved=list(cr.resolved),
        not_ready=dict(cr.not_ready), error=cr.error, result=dict(cr.result),
        assigned=cr.assigned, debugger=cr.debugger, decisions=list(cr.decisions),
        usage=cr.usage.model_dump() if cr.usage is not None else None,
    )  # fmt: skip


_LISTS = ("waits", "conflicts", "escalations", "errors")  # kept as the first N, counted


def record_public(run: RunState) -> RunRecordPublic:
    rec = run.record
    duration = None
    if run.started_at is not None and run.completed_at is not None:
        duration = round(run.completed_at - run.started_at, 6)
    return RunRecordPublic(
        version=run.version, started_at=ts(run.started_at), completed_at=ts(run.completed_at),
        duration_s=duration, counts=run.counts(), fired=run.fired(), waits=rec.waits,
        conflicts=rec.conflicts, escalations=rec.escalations, errors=rec.errors,
        messages_in=rec.messages_in, messages_out=rec.messages_out,
        protocol_violations=rec.protocol_violations, late_replies=rec.late_replies,
        totals={name: rec.totals.get(name, len(getattr(rec, name))) for name in _LISTS},
    )  # fmt: skip


def usage_public(run: RunState) -> UsagePublic:
    """The run's usage against its budget; `wall_s` up to now, or to its end."""
    end = run.completed_at if run.completed_at is not None else time.time()
    wall_s = max(0.0, end - run.started_at) if run.started_at is not None else 0.0
    return UsagePublic(
        tokens=run.usage.tokens, cost=run.usage.cost, counters=dict(run.usage.counters),
        messages=run.messages(), wall_s=round(wall_s, 3),
    )  # fmt: skip


def run_public(run: RunState) -> RunPublic:
    return RunPublic(
        run_id=run.run_id, cuelist=run.cuelist, version=run.version, status=run.status.value,
        dry=run.dry, params=run.params, conditions=run.conditions, hold_reason=run.hold_reason,
        rerun_of=run.rerun_of, reruns=run.reruns,
        created_at=ts(run.created_at), started_at=ts(run.started_at),
        completed_at=ts(run.completed_at), record=record_public(run),
        budget=run.budget.model_dump(exclude_none=True) if run.budget else None,
        usage=usage_public(run),
        cues={cue_id: cue_public(cr) for cue_id, cr in run.cues.items()},
    )  # fmt: skip


def run_summary(run: RunState) -> RunSummary:
    return RunSummary(
        run_id=run.run_id, cuelist=run.cuelist, version=run.version, status=run.status.value,
        hold_reason=run.hold_reason, rerun_of=run.rerun_of,
        dry=run.dry, started_at=ts(run.started_at), completed_at=ts(run.completed_at),
        counts=run.counts(),
    )  # fmt: skip
