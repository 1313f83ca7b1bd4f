"""The envelope, and the one place messages are encoded and decoded.

Decoding validates envelope and payload in one pass (a discriminated union on
`message_type`); a failure raises DecodeError / UnknownMessageType / OversizedMessage
carrying the raw bytes and a short reason, so the entry can be dead-lettered whole.
Encoding writes the bytes pydantic's `model_dump_json` writes, by orjson (bench/codec.py:
about 4x faster), and by pydantic itself for anything orjson would not write the same way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar, Union, get_args

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from protocols.errors import DecodeError, OversizedMessage, UnknownMessageType
from protocols.ids import new_id, utcnow
from protocols.messages import MessageType
from protocols.payloads import PAYLOAD_MODELS, Payload
from protocols.tracecontext import TRACEPARENT_MAX, TRACEPARENT_PATTERN, TRACEPARENT_RULE

PROTOCOL_VERSION = 1
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024
P = TypeVar("P", bound=Payload)


class _TraceParentRule:
    """The `traceparent` field's check: protocols.tracecontext's rule, run by pydantic-core
    itself (a Python validator cost 2-3 us per traced message, decoded or made), with
    what fails it read as absent."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        text = core_schema.str_schema(
            pattern=TRACEPARENT_RULE, min_length=TRACEPARENT_MAX, max_length=TRACEPARENT_MAX,
            strict=True,
        )  # fmt: skip
        return core_schema.with_default_schema(
            core_schema.nullable_schema(text), default=None, on_error="default"
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"anyOf": [{"type": "string"}, {"type": "null"}]}  # the pattern: the Field's


# Optional W3C trace context: a malformed value reads as absent (never refuses the message),
# and an absent one is not written at all, so with tracing off the wire does not change.
TraceParent = Annotated[
    str | None,
    _TraceParentRule,
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
    """A new envelope of `message_type`; the payload must be that type's model. Validated
    as the model's constructor validates it, by its validator directly (the constructor's
    Python around it: 15% of a make)."""
    model = PAYLOAD_MODELS[message_type]
    if not isinstance(payload, model):
        raise TypeError(f"{message_type} takes {model.__name__}, not {type(payload).__name__}")
    fields["message_type"], fields["payload"] = message_type, payload
    made: Envelope = ENVELOPES[message_type].__pydantic_validator__.validate_python(fields)
    return made


def encode(message: Envelope) -> bytes:
    """The bytes `model_dump_json` writes (one exception: `_as_json`), written by orjson."""
    if type(message) in _FIELDS_ONLY:
        fields = message.__dict__
        if message.traceparent is None:  # absent: not written, as the field says
            fields = fields.copy()
            del fields["traceparent"]
        try:
            return orjson.dumps(fields, default=_as_json, option=orjson.OPT_UTC_Z)
        except TypeError:  # a value orjson does not write: pydantic's bytes, or its error
            pass
    return message.model_dump_json().encode()


def writes_fields(model: type[BaseModel]) -> bool:
    """Does pydantic write `model` as its fields (extras after them), as they are? No
    serializer, alias, computed field or exclusion but the envelope's absent traceparent."""
    found = model.__pydantic_decorators__
    if found.field_serializers or found.model_serializers or found.computed_fields:
        return False
    if set(model.model_config) - {"frozen", "extra", "title"}:
        return False
    return all(
        f.alias is None
        and f.serialization_alias is None
        and not f.exclude
        and (f.exclude_if is None or name == "traceparent")
        for name, f in model.model_fields.items()
    )


def models_in(tp: Any) -> set[type[BaseModel]]:
    """The models a type names, and the models their fields name, all the way down."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {tp}.union(*(models_in(f.annotation) for f in tp.model_fields.values()))
    return set().union(*(models_in(arg) for arg in get_args(tp)))


# The models orjson writes from their fields: the envelopes and what they hold. Any other
# object (a model in a free-form JSON field, a set, an int past 64 bits...) sends the
# message through pydantic.
_FIELDS_ONLY = frozenset(m for e in ENVELOPES.values() for m in models_in(e) if writes_fields(m))


def _as_json(value: Any) -> Any:
    """A model inside the envelope, as its fields. orjson writes datetimes itself, as
    pydantic does, but for a UTC offset with seconds (a historical local mean time, never
    one decoded from JSON): RFC 3339 has none, pydantic drops them, orjson rounds them."""
    if type(value) in _FIELDS_ONLY:
        extra = value.__pydantic_extra__
        return value.__dict__ | extra if extra else value.__dict__
    raise TypeError(type(value).__name__)


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
