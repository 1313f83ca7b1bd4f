"""Run budgets: usage totalled per run and cue, one warning escalation per limit, and the
check before each GO that holds back a GO (and so the run) once a limit is spent.

A limit is spent when what was used reaches it. The check runs before every GO, so a
budget is never overspent by more than the cues already GO'd (they run on). Raising the
budget (`change_budget`) lets the held GOs go.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from hub.engine.base import PAUSED, EngineBase
from hub.engine.outbox import Timer
from hub.engine.state import COMPLETIONS_KEPT, MESSAGE_IDS_KEPT, USAGE_IDS_KEPT, CueRun, RunState
from protocols import payloads as p
from protocols.cuelist import Budget
from protocols.errors import Conflict, EngineError
from protocols.messages import MessageType as T
from protocols.states import Severity

BUDGET = "budget"  # timer kind: the run's wall_s warning and end
HELD = f"{PAUSED}budget "  # how the reason of a GO held back by a spent budget starts


def limits(budget: Budget) -> dict[str, float]:
    """Each limit the budget sets, by name (`counters.NAME` for a named counter)."""
    found: dict[str, float] = {
        name: value
        for name in ("tokens", "cost", "messages", "wall_s")
        if (value := getattr(budget, name)) is not None
    }
    found.update({f"counters.{name}": n for name, n in budget.counters.items()})
    return found


def used(run: RunState, now: float) -> dict[str, float]:
    """What the run has used of each kind of limit, by the names `limits` gives."""
    usage = run.usage
    found: dict[str, float] = {
        "tokens": usage.tokens, "cost": usage.cost, "messages": run.messages(),
        "wall_s": max(0.0, now - run.started_at) if run.started_at is not None else 0.0,
    }  # fmt: skip
    found.update({f"counters.{name}": n for name, n in usage.counters.items()})
    return found


def num(value: float) -> str:
    """50112 -> "50,112"; 2.5 -> "2.5" (thousands marked, no trailing zeros)."""
    if isinstance(value, int):  # whatever its size (float() of a huge one overflows)
        return f"{value:,}"
    if value.is_integer():
        return f"{int(value):,}"
    return f"{value:,.4f}".rstrip("0").rstrip(".")


COMPLETED = "completed "


def completion(attempt: int) -> str:
    """What makes a completion's usage one report (with its sender): its attempt, so a copy
    with a new message id, or a late one after the on-time one, is not counted again."""
    return f"{COMPLETED}{attempt}"


def held_by_budget(cr: CueRun) -> bool:
    return (cr.reason or "").startswith(HELD)


class BudgetMixin(EngineBase):
    """The engine's part that counts usage and enforces each run's budget."""

    def count_message(self, run: RunState, cue_id: str, agent: str, message_id: str) -> None:
        """A message `agent` sent for `cue_id`, counted against the run's `messages` once:
        a copy (its XADD sent again after a lost reply, read by a leader that never saw
        the first: the router skips one only within a term) names an id the cue keeps.
        Only a copy is left out, never another message however alike, so the limit is not
        overspent; an id the cue no longer keeps counts again (overstated, as before)."""
        cr = run.cues[cue_id]
        once = f"{agent} {message_id}"  # per sender, as the router's: none skips another's
        if once in cr.message_ids:
            return
        cr.message_ids = [*cr.message_ids, once][-MESSAGE_IDS_KEPT:]
        run.record.messages_in += 1
        self.mark_dirty(run, cue_id)

    def count_usage(
        self, run: RunState, cue_id: str, agent: str, usage: p.Usage, message_id: str = ""
    ) -> None:
        """Add what `agent` reported spending on `cue_id` to the cue's and the run's totals
        (`message_id`: the report's, counted once: a context write may be read again)."""
        if not (usage.tokens or usage.cost or usage.counters):
            return
        cr = run.cues[cue_id]
        if message_id.startswith(COMPLETED):  # a completion: once per sender and attempt
            once = f"{agent} {message_id}"
            if once in cr.completions or once in cr.usage_ids:  # (a hub before kept it there)
                return
            cr.completions = [*cr.completions, once][-COMPLETIONS_KEPT:]
        elif message_id:
            once = f"{agent} {message_id}"  # per sender, as the router's: none skips another's
            if once in cr.usage_ids:
                return
            cr.usage_ids = [*cr.usage_ids, once][-USAGE_IDS_KEPT:]
        limited = list(run.budget.counters) if run.budget is not None else []
        cr.usage = (cr.usage or p.Usage()).plus(usage, kept=limited)
        total = run.usage.plus(usage, kept=limited)
        dropped = sorted(set(usage.counters) - set(total.counters))
        if dropped:
            run.record.note("errors", f"usage counters of {agent} not kept (a run keeps "
                            f"{p.COUNTERS_MAX}): {', '.join(dropped)}")  # fmt: skip
        # a limit added since the run's slots filled takes one from a name no limit names
        evicted = sorted(set(run.usage.counters) - set(total.counters))
        if evicted:
            run.record.note("errors", f"usage counters no longer kept, their slots taken by "
                            f"ones the budget limits: {', '.join(evicted)}")  # fmt: skip
        run.usage = total
        self.mark_dirty(run, cue_id)
        self.record_event(run, "usage", cue=cue_id, agent=agent, **usage.model_dump())

    def over_budget(self, run: RunState) -> str | None:
        """What of the budget is spent ("budget tokens spent 50,112 / 50,000"), or None."""
        if run.budget is None or run.dry:
            return None
        now = used(run, self.clock())
        spent = [
            f"budget {name} spent {num(now.get(name, 0))} / {num(limit)}"
            for name, limit in limits(run.budget).items()
            if now.get(name, 0) >= limit
        ]
        return "; ".join(spent) or None

    def hold_for_budget(self, run: RunState, cue_id: str) -> bool:
        """Before a GO: hold it back (True) when the run's budget is spent."""
        why = self.over_budget(run)
        if why is None:
            return False
        # it waits for the operator, not for its targets: no STANDBY deadline runs out
        self.clear_deadline(run.cues[cue_id])
        self.set_reason(run, cue_id, f"{PAUSED}{why}")
        return True

    def review_budgets(self, run_ids: Iterable[str]) -> None:
        """One medium escalation per run and limit once `warn_at` of it is used (again
        for a raised limit), for each run a step touched."""
        for run_id in list(run_ids):
            run = self.runs.get(run_id)
            if run is None or run.budget is None or run.dry or run.status.done:
                continue
            budget, now = run.budget, used(run, self.clock())
            for name, limit in limits(budget).items():
                spent, tag = now.get(name, 0), f"{name}@{num(limit).replace(',', '')}"
                if spent < limit * budget.warn_at or tag in run.budget_warned:
                    continue
                run.budget_warned.append(tag)
                self.mark_dirty(run)
                if spent >= limit:
                    detail = f"budget {name} spent {num(spent)} / {num(limit)}: no new GO"
                else:
                    share = f"{spent / limit:.0%}" if limit else "all"
                    detail = f"budget {name} at {share}: {num(spent)} / {num(limit)}"
                payload = p.EscalationError(
                    severity=Severity.MEDIUM, cause=f"budget:{tag}", detail=detail
                )
                self.escalate(run, None, T.ESCALATION_ERROR, payload)

    def change_budget(self, run_id: str, changes: dict[str, Any]) -> RunState:
        """POST /v1/runs/{id}/budget: apply new limits (null removes one); the GOs held
        back go if the budget allows them now."""
        run = self._run(run_id)
        if run.status.done:
            raise Conflict(f"run {run_id} is already {run.status.value}")
        try:
            run.budget = (run.budget or Budget()).merged(changes)
        except ValidationError as exc:
            raise EngineError(f"bad budget: {exc.errors()[0]['msg']}") from None
        self.mark_dirty(run)
        self.record_event(run, "budget", budget=run.budget.model_dump(exclude_none=True))
        self.budget_timers(run)
        for cue_id, cr in run.cues.items():
            if held_by_budget(cr):
                self.go_held(run, cue_id)
        self.review_holds([run_id])  # the reply tells how it stands now, not before the GOs
        return run

    def budget_timers(self, run: RunState) -> None:
        """Timers at `warn_at` of the run's `wall_s` and at its end (the step they fire
        reviews the budget and the hold)."""
        budget = run.budget
        if budget is None or budget.wall_s is None or run.started_at is None or run.dry:
            return
        for share in (budget.warn_at, 1.0):
            at = run.started_at + budget.wall_s * share
            self.out.timers.append(Timer(at, run.run_id, "", 0, BUDGET))


def usage_in_context(metadata: dict[str, Any]) -> p.Usage | str | None:
    """The usage a `task.context` write reports in `metadata.usage`: None when there is
    none, the reason when it is not a usage."""
    raw = metadata.get("usage")
    if raw is None:
        return None
    try:
        return p.Usage.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        return f"metadata.usage{'.' + where if where else ''}: {err['msg']}"
