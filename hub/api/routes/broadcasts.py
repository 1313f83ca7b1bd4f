"""POST /v1/broadcasts: send a broadcast.* to every replica (pause and resume also gate GOs)."""

from __future__ import annotations

from fastapi import APIRouter, status
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from hub.api.deps import HubDep
from hub.api.schemas import BroadcastCreate, BroadcastPublic, ErrorPublic
from hub.commands import Broadcast
from protocols.messages import Channel, MessageType
from protocols.payloads import PAYLOAD_MODELS

router = APIRouter(prefix="/broadcasts", tags=["broadcasts"])
BROADCAST_TYPES = sorted(t.value for t in MessageType if t.channel is Channel.BROADCAST)


@router.post(
    "",
    response_model=BroadcastPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={422: {"model": ErrorPublic}},
)
async def send_broadcast(body: BroadcastCreate, hub: HubDep) -> BroadcastPublic:
    if body.message_type not in BROADCAST_TYPES:
        allowed = ", ".join(BROADCAST_TYPES)
        raise RequestValidationError([{
            "type": "not_broadcast", "loc": ("body", "message_type"),
            "msg": f"{body.message_type!r} is not one of {allowed}",
        }])  # fmt: skip
    mt = MessageType(body.message_type)
    try:
        PAYLOAD_MODELS[mt].model_validate(body.payload)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", "payload", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None
    command = Broadcast(message_type=mt.value, payload=body.payload)
    reply = await hub.commands.call(command, timeout_s=hub.settings.command_timeout_s)
    return BroadcastPublic(sent=reply.sent)
