"""A run's budget: `POST /v1/runs/{id}/budget` sets new limits, and the GOs a spent budget
held back go (the run's `usage` and `budget` are shown by `GET /v1/runs/{id}`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import ValidationError

from hub.api import idempotency
from hub.api.deps import HubDep, RunDep
from hub.api.errors import issue_dict
from hub.api.idempotency import AskedDep
from hub.api.schemas import BudgetChange, BudgetPublic, ErrorPublic
from hub.api.views import usage_public
from hub.commands import ChangeBudget
from protocols.cuelist import Budget
from protocols.errors import Conflict, Unprocessable

router = APIRouter(prefix="/runs", tags=["runs"])
REFUSED: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorPublic}, 409: {"model": ErrorPublic}, 422: {"model": ErrorPublic},
}  # fmt: skip


def budget_changes(body: BudgetChange, base: Budget | None) -> dict[str, Any]:
    """The limits a request sets, checked as they would apply over `base` (422 naming the
    key when the result is not a budget, or when the request sets nothing)."""
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        issue = issue_dict(
            {"code": "missing", "message": "give at least one limit", "key": "budget"}
        )
        raise Unprocessable(
            "give at least one limit: tokens, cost, messages, wall_s, counters", errors=[issue]
        )
    try:
        (base or Budget()).merged(changes)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        key = f"budget.{where}"  # the 422's `errors`, as a request that does not validate
        issue = issue_dict({"code": err["type"], "message": err["msg"], "key": key})
        raise Unprocessable(
            f"invalid budget: {where}: {err['msg']}", key=key, errors=[issue]
        ) from None
    return changes


@router.post("/{run_id}/budget", response_model=BudgetPublic, responses=REFUSED)
async def change_budget(
    run: RunDep, body: BudgetChange, hub: HubDep, key: AskedDep = None
) -> BudgetPublic:
    """Set the run's limits (a key left out keeps its limit, null removes it); a run held
    by a spent budget goes on when the new one allows. 409 for a run that ended."""

    async def command() -> ChangeBudget:
        if run.status.done:
            raise Conflict(f"run {run.run_id} is already {run.status.value}")
        return ChangeBudget(run_id=run.run_id, changes=budget_changes(body, run.budget))

    reply = await idempotency.call(hub, key, ChangeBudget, command, body)
    now = await hub.store.run(run.run_id) or run  # the held GOs that went count messages
    return BudgetPublic(
        run_id=run.run_id, status=reply.status, hold_reason=reply.hold_reason,
        budget=reply.budget, usage=usage_public(now),
    )  # fmt: skip
