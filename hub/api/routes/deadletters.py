"""GET /v1/deadletters: dead-lettered entries, newest first, with their reasons."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from hub.api.deps import HubDep
from hub.api.schemas import DeadLetterPublic, DeadLettersPublic

router = APIRouter(prefix="/deadletters", tags=["deadletters"])


@router.get("", response_model=DeadLettersPublic)
async def list_dead_letters(
    hub: HubDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> DeadLettersPublic:
    letters = await hub.transport.dead_letters(limit)
    data = [
        DeadLetterPublic(
            id=d["id"],
            reason=d.get("reason", ""),
            stream=d.get("stream"),
            entry_id=d.get("entry_id"),
            group=d.get("group") or None,
            deliveries=d.get("deliveries", 0),
            at=d.get("at") or None,
            raw_text=d.get("raw_text", ""),
        )
        for d in letters
    ]
    return DeadLettersPublic(data=data, count=len(data))
