"""GET /v1/escalations (the operator queue) and POST /v1/escalations/{id}/resolve (binding)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from hub.api import idempotency
from hub.api.deps import HubDep
from hub.api.idempotency import AskedDep
from hub.api.schemas import (
    ErrorPublic,
    EscalationPublic,
    EscalationResolve,
    EscalationsPublic,
    ts,
)
from hub.commands import Resolve
from hub.engine.escalations import Escalation
from protocols.errors import NotFound

router = APIRouter(prefix="/escalations", tags=["escalations"])


def public(esc: Escalation) -> EscalationPublic:
    data = esc.model_dump(mode="json")
    data.update(created_at=ts(esc.created_at), updated_at=ts(esc.updated_at))
    if esc.resolution and isinstance(esc.resolution.get("at"), int | float):
        data["resolution"] = {**esc.resolution, "at": ts(esc.resolution["at"])}
    return EscalationPublic.model_validate(data)


@router.get("", response_model=EscalationsPublic)
async def list_escalations(
    hub: HubDep,
    status: Annotated[str | None, Query(description="open, recorded or resolved")] = None,
    run_id: Annotated[str | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> EscalationsPublic:
    escs = await hub.store.escalations(limit)
    data = [
        public(e)
        for e in escs
        if (status is None or e.status == status) and (run_id is None or e.run_id == run_id)
    ]
    return EscalationsPublic(data=data, count=len(data))


@router.post(
    "/{esc_id}/resolve",
    response_model=EscalationPublic,
    responses={404: {"model": ErrorPublic}, 409: {"model": ErrorPublic}},
)
async def resolve_escalation(
    hub: HubDep,
    esc_id: Annotated[str, Path(min_length=1, max_length=200)],
    body: EscalationResolve | None = None,
    key: AskedDep = None,
) -> EscalationPublic:
    async def command() -> Resolve:
        if await hub.store.escalation(esc_id) is None:
            raise NotFound(f"no escalation {esc_id}")
        asked = body or EscalationResolve()
        note, answer = asked.note or "", asked.answer or ""
        return Resolve(id=esc_id, winner=asked.winner, note=note, answer=answer)

    await idempotency.call(hub, key, Resolve, command, body)
    esc = await hub.store.escalation(esc_id)
    if esc is None:
        raise NotFound(f"no escalation {esc_id}")
    return public(esc)
