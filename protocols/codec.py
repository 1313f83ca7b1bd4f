"""The envelope, and the one place messages are encoded and decoded.

Decoding validates envelope and payload in one pass (a discriminated union on
`message_type`); a failure raises DecodeError / UnknownMessageType / OversizedMessage
carrying the raw bytes and a short reason, so the entry can be dead-lettered whole.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)

from protocols.errors import DecodeError, OversizedMessage, UnknownMessageType
from protocols.ids import new_id, utcnow
from protocols.messages import MessageType
from protocols.payloads import PAYLOAD_MODELS, Payload
from protocols.tracecontext import TRACEPARENT_PATTERN, valid_traceparent

PROTOCOL_VERSION = 1
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
P = TypeVar("P", bound=Payload)
# Optional W3C trace context: a malformed value reads as absent (never refuses the message),
# and an absent one is not written at all, so with tracing off the wire does not change.
TraceParent = Annotated[
    str | None,
    BeforeValidator(valid_traceparent),
    Field(
        default=None,
        exclude_if=lambda value: value is None,
        json_schema_extra={"pattern": TRACEPARENT_PATTERN},
        description="W3C trace context (version 00), when tracing is on; a malformed "
        "value is ignored",
    ),
]


class Envelope(BaseModel):
    """A message on the wire (see PROTOCOL.md). Build one with `make`; decode one with `decode`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    message_id: str = Field(default_factory=new_id, min_length=1, max_length=64)
    message_type: MessageType
    from_agent: str = Field(default="", max_length=64)
    target_agents: tuple[str, ...] = ()
    run_id: str | None = Field(default=None, max_length=64)
    cue_id: str | None = Field(default=None, max_length=128)
    in_reply_to: str | None = Field(default=None, max_length=64)
    sent_at: datetime = Field(default_factory=utcnow)
    payload: Payload
    v: Literal[1] = 1  # PROTOCOL_VERSION
    traceparent: TraceParent = None

    def body(self, model: type[P]) -> P:
        """The payload as `model`, checked: how a reader gets a typed payload. Decoding
        made the payload its type's model, so a mismatch is a bug (TypeError)."""
        payload = self.payload
        if not isinstance(payload, model):
            raise TypeError(
                f"{self.message_type} carries {type(payload).__name__}, not {model.__name__}"
            )
        return payload

    def reply(self, message_type: MessageType, payload: Payload, **fields: Any) -> Envelope:
        """A message answering this one: same run and cue, `in_reply_to` set."""
        fields.setdefault("run_id", self.run_id)
        fields.setdefault("cue_id", self.cue_id)
        return make(message_type, payload, in_reply_to=self.message_id, **fields)


def _variant(mt: MessageType) -> type[Envelope]:
    literal: Any = Literal[mt]
    return create_model(
        f"Envelope[{mt.value}]",
        __base__=Envelope,
        message_type=(literal, ...),
        payload=(PAYLOAD_MODELS[mt], ...),
    )


ENVELOPES: dict[MessageType, type[Envelope]] = {mt: _variant(mt) for mt in MessageType}
_UNION: Any = Annotated[Union[tuple(ENVELOPES.values())], Field(discriminator="message_type")]  # noqa: UP007
_ANY_ENVELOPE: TypeAdapter[Envelope] = TypeAdapter(_UNION)


def make(message_type: MessageType, payload: Payload, **fields: Any) -> Envelope:
    """A new envelope of `message_type`; the payload must be that type's model."""
    model = PAYLOAD_MODELS[message_type]
    if not isinstance(payload, model):
        raise TypeError(f"{message_type} takes {model.__name__}, not {type(payload).__name__}")
    return ENVELOPES[message_type](message_type=message_type, payload=payload, **fields)


def encode(message: Envelope) -> bytes:
    return message.model_dump_json().encode()


def decode(raw: bytes | str, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Envelope:
    """The envelope in `raw`, validated with its payload model, or a ProtocolError."""
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        raise OversizedMessage(f"message of {len(data)} bytes over the {max_bytes} limit", data)
    try:
        return _ANY_ENVELOPE.validate_json(data)
    except ValidationError as exc:
        raise _decode_error(exc, data) from None


def _decode_error(exc: ValidationError, data: bytes) -> DecodeError | UnknownMessageType:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    kind = first["type"]
    if kind == "json_invalid":
        return DecodeError(f"not JSON: {first['msg']}", data)
    if kind == "model_attributes_type" or kind == "model_type":
        return DecodeError("not a JSON object", data)
    if kind == "union_tag_invalid":
        return UnknownMessageType(f"unknown message_type: {first['ctx']['tag']!r}", data)
    if kind == "union_tag_not_found":
        return DecodeError("missing message_type", data)
    where = ".".join(str(p) for p in first["loc"][1:]) or "envelope"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return DecodeError(f"bad field {where}: {first['msg']}{more}", data)
