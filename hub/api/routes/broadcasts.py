"""POST /v1/broadcasts: send a broadcast.* to every replica (pause and resume also gate GOs);
its body, whose schema is one shape per type, each type's payload its own."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hub.api import idempotency
from hub.api.deps import HubDep
from hub.api.idempotency import AskedDep
from hub.api.schemas import ErrorPublic, In, PlainObject
from hub.commands import Broadcast
from hub.commands.client import to_every_partition
from protocols.messages import Channel, MessageType
from protocols.payloads import PAYLOAD_MODELS

router = APIRouter(prefix="/broadcasts", tags=["broadcasts"])
BROADCAST_TYPES = sorted(t.value for t in MessageType if t.channel is Channel.BROADCAST)


def _inlined(schema: Any, defs: dict[str, Any] | None = None) -> Any:
    """`schema` with each `$ref` to its own `$defs` put in place (a payload's enums), so it
    can stand inside another schema."""
    if defs is None and isinstance(schema, dict):
        defs = schema.get("$defs", {})
        schema = {k: v for k, v in schema.items() if k != "$defs"}
    if isinstance(schema, list):
        return [_inlined(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return {**_inlined((defs or {})[schema["$ref"].rsplit("/", 1)[1]], defs), **rest}
    return {key: _inlined(value, defs) for key, value in schema.items()}


def _broadcast_schema(schema: dict[str, Any]) -> None:
    """One shape per broadcast type, its payload that type's (protocols.payloads): what the
    route checks a payload against, said in the schema."""
    options = []
    for mt in sorted(PAYLOAD_MODELS, key=lambda t: t.value):
        if mt.channel is not Channel.BROADCAST:
            continue
        payload = _inlined(PAYLOAD_MODELS[mt].model_json_schema())
        needs = ["message_type", "payload"] if payload.get("required") else ["message_type"]
        options.append({
            "type": "object", "additionalProperties": False, "required": needs,
            "properties": {"message_type": {"const": mt.value}, "payload": payload},
        })  # fmt: skip
    for key in ("properties", "required", "additionalProperties", "type"):
        schema.pop(key, None)
    schema["oneOf"] = options


class BroadcastCreate(In):
    """A broadcast.* type and its payload (`oneOf` in the schema, a shape per type)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_broadcast_schema)

    message_type: str = Field(description="a broadcast.* type")
    payload: PlainObject = Field(default_factory=dict)


class BroadcastPublic(BaseModel):
    sent: str


@router.post(
    "",
    response_model=BroadcastPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={409: {"model": ErrorPublic}, 422: {"model": ErrorPublic}},
)
async def send_broadcast(
    body: BroadcastCreate, hub: HubDep, key: AskedDep = None
) -> BroadcastPublic:
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
    if to_every_partition(command):  # pause, resume: each partition keeps its own reply
        reply = await idempotency.call_everywhere(hub, key, command, body)
    else:

        async def made() -> Broadcast:
            return command

        reply = await idempotency.call(hub, key, Broadcast, made, body)
    return BroadcastPublic(sent=reply.sent)
