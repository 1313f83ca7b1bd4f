"""GET /v1/deadletters: dead-lettered entries, newest first, with their reasons; paged."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from hub.api.deps import HubDep
from hub.api.schemas import DeadLetterPublic, DeadLettersPublic
from protocols.keys import ENTRY_ID_PARAM, is_entry_id

router = APIRouter(prefix="/deadletters", tags=["deadletters"])
PAGE_MAX = 100  # letters per page: each keeps at most CALLBOARD_DEADLETTER_RAW_BYTES of raw


@router.get("", response_model=DeadLettersPublic)
async def list_dead_letters(
    hub: HubDep,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = PAGE_MAX,
    before: Annotated[
        str | None,
        Query(pattern=ENTRY_ID_PARAM, description="only letters older than this letter id"),
    ] = None,
) -> DeadLettersPublic:
    if before is not None and not is_entry_id(before):
        raise HTTPException(422, f"before: {before!r} is not a stream entry id Redis accepts")
    letters = await hub.transport.dead_letters(limit + 1, before=before)
    page = letters[:limit]
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
            sender=d.get("sender") or None,
            raw_size=d["raw_size"],
            raw_sha256=d["raw_sha256"],
            raw_truncated=d["raw_size"] > len(d["raw"]),
        )
        for d in page
    ]
    more = len(letters) > limit
    return DeadLettersPublic(data=data, count=len(data), next=page[-1]["id"] if more else None)
