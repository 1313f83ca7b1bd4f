"""`encode` (orjson) writes the bytes pydantic's `model_dump_json` writes, or fails as it does.

Every message type, with free-form JSON fields holding what a caller may put there: odd
floats, ints past 64 bits, datetimes in any zone, sets, bytes, int keys, models, text
orjson refuses. Decoded messages (pydantic's own datetimes) are written again the same.
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, field_serializer

from protocols import payloads as p
from protocols.codec import decode, encode, make
from protocols.messages import MessageType
from protocols.tracecontext import format_traceparent
from tests.protocols.test_codec import payload_strategy

MINUTE = timedelta(minutes=1)


class Colour(enum.StrEnum):
    RED = "red"


class Shouted(BaseModel):
    """A model pydantic writes through a serializer: never written from its fields."""

    word: str

    @field_serializer("word")
    def _loud(self, word: str) -> str:
        return word.upper()


def whole_minutes(moment: datetime) -> bool:
    """An offset RFC 3339 can write (the one exception to equal bytes: codec._as_json)."""
    offset = moment.utcoffset()
    return offset is None or not offset % MINUTE


zones = (
    st.none()
    | st.just(UTC)
    | st.timezones()
    | st.builds(timezone, st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: m * MINUTE))
)
moments = st.datetimes(timezones=zones).filter(whole_minutes)
odd_scalar = (
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too: orjson refuses those
    | st.floats()  # nan and infinities too
    | st.text(max_size=8)
    | st.sampled_from(["\ud800", "a\udfffb", "\x00\x1f\x7f", "\u2028", 'é/\\"'])
    | moments
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, places=3)
    | st.binary(max_size=4)
    | st.just(Colour.RED)
    | st.builds(p.Artifact, path=st.text(max_size=4), hash=st.text(max_size=4))
    | st.builds(Shouted, word=st.text(max_size=4))
)
odd_value = st.recursive(
    odd_scalar,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.frozensets(st.integers(0, 9), max_size=2)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        | st.dictionaries(st.integers(0, 9), inner, max_size=2)  # keys pydantic makes strings
    ),
    max_leaves=6,
)


def fill_free_form(payload: p.Payload, data: st.DataObject) -> p.Payload:
    """`payload` with its free-form fields (dict[str, Any], Any, a handoff's extra context
    items) holding odd values."""
    free_form = st.dictionaries(st.text(max_size=4).map("x-".__add__), odd_value, max_size=3)
    update: dict[str, Any] = {}
    for name, field in type(payload).model_fields.items():
        if field.annotation == dict[str, Any]:
            update[name] = data.draw(free_form)
        elif field.annotation is Any:
            update[name] = data.draw(odd_value)
    if isinstance(payload, p.TaskHandoff):
        items = payload.handoff_context.model_dump() | data.draw(free_form)
        update["handoff_context"] = p.HandoffContext.model_validate(items)
    return type(payload).model_validate(payload.model_dump() | update) if update else payload


def written(message: Any) -> bytes | type[Exception]:
    try:
        return encode(message)
    except Exception as exc:
        return type(exc)


def pydantic_wrote(message: Any) -> bytes | type[Exception]:
    try:
        return bytes(message.model_dump_json().encode())
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("mt", list(MessageType), ids=str)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_orjson_writes_pydantic_bytes(mt: MessageType, data: st.DataObject) -> None:
    payload = fill_free_form(data.draw(payload_strategy(mt)), data)
    trace = data.draw(st.none() | st.just(format_traceparent(0xABC, 0xDEF)))
    message = make(
        mt, payload, sent_at=data.draw(moments), traceparent=trace,
        run_id=data.draw(st.none() | st.text(max_size=8)), target_agents=("a", "b"),
    )  # fmt: skip
    ours = written(message)
    assert ours == pydantic_wrote(message)
    if isinstance(ours, bytes):  # what was written reads back, and is written the same again
        again = decode(ours)
        assert written(again) == pydantic_wrote(again) == ours


def test_free_form_values_orjson_refuses_take_pydantics_path() -> None:
    """Checks the property above meets both paths: pydantic's answer where orjson has none."""
    completed = p.StatusCompleted(
        result={"big": 2**70, "set": frozenset({1}), "model": Shouted(word="hi"), "keys": {1: 2}}
    )
    message = make(MessageType.STATUS_COMPLETED, completed)
    assert b'"big":1180591620717411303424' in encode(message)
    assert b'"model":{"word":"HI"}' in encode(message)  # its serializer, not its fields
    assert encode(message) == message.model_dump_json().encode()
    surrogate = make(MessageType.STATUS_COMPLETED, p.StatusCompleted(result={"s": "\ud800"}))
    refused = written(surrogate)
    assert refused is pydantic_wrote(surrogate) and not isinstance(refused, bytes)


def test_an_offset_with_seconds_is_the_one_difference() -> None:
    """RFC 3339 has no seconds in an offset: pydantic drops them, orjson rounds them."""
    lmt = timezone(timedelta(minutes=-44, seconds=-30))  # Monrovia's mean time until 1972
    sent_at = datetime(1970, 1, 1, tzinfo=lmt)
    message = make(MessageType.ACK_WARNING, p.AckWarning(), sent_at=sent_at)
    assert b'"sent_at":"1970-01-01T00:00:00-00:44"' in message.model_dump_json().encode()
    assert b'"sent_at":"1970-01-01T00:00:00-00:45"' in encode(message)


def test_traceparent_written_only_when_present() -> None:
    bare = make(MessageType.ACK_WARNING, p.AckWarning(), message_id="m1")
    traced = bare.model_copy(update={"traceparent": format_traceparent(1, 2)})
    assert b"traceparent" not in encode(bare)
    assert encode(traced).endswith(b',"traceparent":"' + format_traceparent(1, 2).encode() + b'"}')
    assert decode(encode(traced)).traceparent == format_traceparent(1, 2)


def test_uuid_and_decimal_in_free_form_fields() -> None:
    value = {"id": uuid.UUID(int=1), "d": Decimal("1.50"), "t": (1, "x"), "c": Colour.RED}
    message = make(MessageType.TASK_CONTEXT, p.TaskContext(key="k", value=value))
    assert encode(message) == message.model_dump_json().encode()
