"""The OTLP/protobuf bytes of an export request, written straight from span records.

The OpenTelemetry SDK's OTLP exporter encodes `ReadableSpan`s through protobuf objects,
one per span, attribute, value, event and link: 28-45 us a span on the bench machine
(bench/codec.py), more than the hub spends on the cue the span describes. callboard knows
each ended span as a record of plain values (protocols.telemetry), so it writes the
protobuf wire format of `ExportTraceServiceRequest` (opentelemetry-proto's
collector/trace/v1) directly: the resource and scope once per process, each span's bytes
once. The message written is the one the SDK's encoder builds from the same span, field
for field (tests/protocols/test_otlp.py parses both and compares them), so a collector
cannot tell the two apart.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind

_KIND = {  # Span.SpanKind's values, as varints
    SpanKind.INTERNAL: b"\x01", SpanKind.SERVER: b"\x02", SpanKind.CLIENT: b"\x03",
    SpanKind.PRODUCER: b"\x04", SpanKind.CONSUMER: b"\x05",
}  # fmt: skip
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200  # SpanFlags, as the SDK's encoder sets them
STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR
_Q = struct.Struct("<Q")
_D = struct.Struct("<d")
_BYTE = [bytes((i,)) for i in range(0x80)]  # the one-byte varints
_TIMES = struct.Struct("<Q1sQ")  # a span's start, its end's tag, its end


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _BYTE[n]
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF  # int64: two's complement over ten bytes
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _prefixed(payload: bytes) -> bytes:
    """A length-delimited field's length and bytes (its tag goes before)."""
    n = len(payload)
    return (_BYTE[n] if n < 0x80 else _varint(n)) + payload


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, its length, its bytes."""
    return tag + _prefixed(payload)


# Tags, by message and field (wire type 0: varint, 1: 64-bit, 2: length-delimited, 5: 32-bit)
_ANY_STRING, _ANY_BOOL, _ANY_INT, _ANY_DOUBLE = _tag(1, 2), _tag(2, 0), _tag(3, 0), _tag(4, 1)
_ANY_ARRAY, _ANY_KVLIST, _ANY_BYTES = _tag(5, 2), _tag(6, 2), _tag(7, 2)
_LIST_VALUES = _tag(1, 2)  # ArrayValue.values, KeyValueList.values
_KV_KEY, _KV_VALUE = _tag(1, 2), _tag(2, 2)
_SPAN_TRACE, _SPAN_ID, _SPAN_PARENT, _SPAN_NAME = _tag(1, 2), _tag(2, 2), _tag(4, 2), _tag(5, 2)
_SPAN_KIND, _SPAN_START, _SPAN_END, _SPAN_ATTR = _tag(6, 0), _tag(7, 1), _tag(8, 1), _tag(9, 2)
_SPAN_EVENT, _SPAN_LINK, _SPAN_STATUS = _tag(11, 2), _tag(13, 2), _tag(15, 2)
_SPAN_FLAGS = _tag(16, 5)
_EVENT_TIME, _EVENT_NAME, _EVENT_ATTR = _tag(1, 1), _tag(2, 2), _tag(3, 2)
_LINK_TRACE, _LINK_SPAN, _LINK_ATTR, _LINK_FLAGS = _tag(1, 2), _tag(2, 2), _tag(4, 2), _tag(6, 5)
_STATUS_MESSAGE, _STATUS_CODE = _tag(2, 2), _tag(3, 0)
_REQUEST_RESOURCE_SPANS = _tag(1, 2)
_RS_RESOURCE, _RS_SCOPE_SPANS, _RS_SCHEMA = _tag(1, 2), _tag(2, 2), _tag(3, 2)
_RESOURCE_ATTR = _tag(1, 2)
_SS_SCOPE, _SS_SPANS, _SS_SCHEMA = _tag(1, 2), _tag(2, 2), _tag(3, 2)
_SCOPE_NAME, _SCOPE_VERSION, _SCOPE_ATTR = _tag(1, 2), _tag(2, 2), _tag(3, 2)
_FLAGS_ROOT = _SPAN_FLAGS + struct.pack("<I", HAS_IS_REMOTE)
_FLAGS_REMOTE = _SPAN_FLAGS + struct.pack("<I", HAS_IS_REMOTE | IS_REMOTE)
_LINK_FLAGS_LOCAL = _LINK_FLAGS + struct.pack("<I", HAS_IS_REMOTE)
_LINK_FLAGS_REMOTE = _LINK_FLAGS + struct.pack("<I", HAS_IS_REMOTE | IS_REMOTE)
_STATUS_UNSET = _SPAN_STATUS + b"\x00"  # present and empty, as the SDK writes it
# An id field's tag and length: trace ids are 16 bytes, span ids 8
_TRACE_FIELD, _ID_FIELD = _SPAN_TRACE + b"\x10", _SPAN_ID + b"\x08"
_PARENT_FIELD = _SPAN_PARENT + b"\x08"
_LINK_TRACE_FIELD, _LINK_SPAN_FIELD = _LINK_TRACE + b"\x10", _LINK_SPAN + b"\x08"
_KIND_START = {kind: _SPAN_KIND + value + _SPAN_START for kind, value in _KIND.items()}


def any_value(value: Any) -> bytes:
    """An AnyValue's bytes, by the SDK encoder's rules (None: an empty value). What it
    refuses (a type, an int past int64, a string that is not UTF-8) raises TypeError or
    ValueError: the attribute is then left out, as the SDK leaves it out."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return _ANY_BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, str):
        return _field(_ANY_STRING, value.encode())
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise TypeError(f"int {value} is out of int64's range")
        return _ANY_INT + _varint(value)
    if isinstance(value, float):
        return _ANY_DOUBLE + _D.pack(value)
    if isinstance(value, bytes):
        return _field(_ANY_BYTES, value)
    if isinstance(value, Sequence):
        return _field(_ANY_ARRAY, b"".join(_field(_LIST_VALUES, any_value(v)) for v in value))
    if isinstance(value, Mapping):
        pairs = b"".join(_LIST_VALUES + _pair(str(k), v) for k, v in value.items())
        return _field(_ANY_KVLIST, pairs)
    raise TypeError(f"invalid type {type(value).__name__} of value {value!r}")


_keys: dict[str, bytes] = {}  # key -> a KeyValue's key field and its value's tag
MAX_KEYS = 1024
_SMALL_INT = [b"\x02" + _ANY_INT + b for b in _BYTE]  # an AnyValue of 0-127, length first


def _head(key: str) -> bytes:
    """A KeyValue's key field and its value's tag (kept: spans use few keys)."""
    head = _keys.get(key)
    if head is None:
        if len(_keys) >= MAX_KEYS:
            _keys.clear()
        head = _keys[key] = _field(_KV_KEY, key.encode()) + _KV_VALUE
    return head


def _pair(key: str, value: Any) -> bytes:
    """A KeyValue's bytes, length first (`any_value` raises on what the SDK refuses)."""
    return _prefixed(_head(key) + _prefixed(any_value(value)))


class Frozen(Mapping[str, Any]):
    """Attributes that never change, shared by many spans' events or links (a link's
    `messaging.operation.type=process`, a GO's `fired_by`): written once per tag."""

    __slots__ = ("_items", "_written", "events", "links")

    def __init__(self, items: Mapping[str, Any]) -> None:
        self._items = dict(items)
        self._written: dict[bytes, bytes] = {}
        self.events: dict[str, tuple[bytes, bytes]] = {}  # by event name: otlp._event's
        self.links: dict[bool, tuple[bytes, bytes]] = {}  # by remote: otlp._link's

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Frozen({self._items!r})"

    def written(self, tag: bytes) -> bytes:
        found = self._written.get(tag)
        if found is None:
            found = self._written[tag] = attributes(tag, self._items)
        return found


def attributes(tag: bytes, attrs: Mapping[str, Any] | None) -> bytes:
    """Repeated KeyValue fields under `tag`; a value the SDK refuses is left out. A short
    string, the most common value, is written here in one join (keeping each pair's bytes
    to join them again cost more: a cue's id is new on every span)."""
    if not attrs:
        return b""
    if type(attrs) is Frozen:
        return attrs.written(tag)
    out: list[bytes] = []
    for key, value in attrs.items():
        try:
            head = _keys.get(key) or _head(key)
            kind = type(value)
            if kind is str:
                raw = value.encode()
                n = len(raw)
                size = len(head) + n + 3  # the key, the AnyValue's length, tag, length, bytes
                if size < 0x80:
                    out += (tag, _BYTE[size], head, _BYTE[n + 2], _ANY_STRING, _BYTE[n], raw)
                    continue
            elif kind is int and 0 <= value < 0x80 and len(head) < 0x7D:  # an attempt, a count
                out += (tag, _BYTE[len(head) + 3], head, _SMALL_INT[value])
                continue
            out += (tag, _prefixed(head + _prefixed(any_value(value))))
        except (TypeError, ValueError):
            continue
    return b"".join(out)


_EventParts = tuple[bytes, bytes]  # an event's bytes before its time, and after it
_events: dict[str, _EventParts] = {}  # an event name (no attributes) -> its parts


def _event(name: str, attrs: Mapping[str, Any] | None) -> _EventParts:
    """An event's bytes around its time: kept for events with no attributes or Frozen ones
    (most are: a cue's phases), written for others."""
    store = _events if not attrs else attrs.events if type(attrs) is Frozen else None
    if store is not None and (found := store.get(name)) is not None:
        return found
    tail = _field(_EVENT_NAME, name.encode()) if name else b""
    if attrs:
        tail += attributes(_EVENT_ATTR, attrs)
    parts = _SPAN_EVENT + _varint(len(tail) + 9) + _EVENT_TIME, tail  # the time: 9 bytes
    if store is not None:
        if len(store) >= MAX_KEYS:
            store.clear()
        store[name] = parts
    return parts


def _link(attrs: Mapping[str, Any] | None, remote: bool) -> tuple[bytes, bytes]:
    """A link's bytes before its ids (its length: the ids' fields take 28 bytes) and after
    them: kept on Frozen attributes, and for none."""
    if attrs is None:
        return _PLAIN_LINKS[remote]
    if type(attrs) is Frozen:
        found = attrs.links.get(remote)
        if found is None:
            found = attrs.links[remote] = _link(dict(attrs), remote)
        return found
    tail = attributes(_LINK_ATTR, attrs) + (_LINK_FLAGS_REMOTE if remote else _LINK_FLAGS_LOCAL)
    return _SPAN_LINK + _varint(len(tail) + 28) + _LINK_TRACE_FIELD, tail


# A span's events (name, attributes, time) and links (trace and span ids, remote, sampled,
# attributes): protocols.telemetry's EventRecord and LinkRecord
_Events = Sequence[tuple[str, Mapping[str, Any] | None, int]]
_Links = Sequence[tuple[int, int, bool, bool, Mapping[str, Any] | None]]
_PLAIN_LINKS = {  # a link with no attributes, local and remote
    remote: (_SPAN_LINK + _varint(len(flags) + 28) + _LINK_TRACE_FIELD, flags)
    for remote, flags in ((False, _LINK_FLAGS_LOCAL), (True, _LINK_FLAGS_REMOTE))
}


def span(
    name: str, trace_id: int, span_id: int, parent_id: int | None, kind: SpanKind,
    start_ns: int, end_ns: int, attrs: Mapping[str, Any], events: _Events, links: _Links,
    error: str | None,
) -> bytes:  # fmt: skip
    """One Span's bytes (a record of protocols.telemetry: its parent, when it has one, is
    remote; the end is not before the start). `error` is the status message of an error
    status, cut to 500 characters; none, the status is unset."""
    parts = [_TRACE_FIELD, trace_id.to_bytes(16, "big"), _ID_FIELD, span_id.to_bytes(8, "big")]
    if parent_id is not None:
        parts += (_PARENT_FIELD, parent_id.to_bytes(8, "big"))
    if name:
        parts += (_SPAN_NAME, _prefixed(name.encode()))
    parts += (
        _KIND_START[kind], _TIMES.pack(start_ns, _SPAN_END, max(end_ns, start_ns)),
        attributes(_SPAN_ATTR, attrs),
    )  # fmt: skip
    return _ending(parts, events, links, error, parent_id is None)


def _ending(
    parts: list[bytes], events: _Events, links: _Links, error: str | None, root: bool
) -> bytes:
    """A span's bytes: `parts` (its ids, name, kind, times and attributes), then its events,
    links, status and flags."""
    for event_name, event_attrs, at in events:  # `_event`'s, its kept parts looked up here
        found = (
            _events.get(event_name) if event_attrs is None
            else event_attrs.events.get(event_name) if type(event_attrs) is Frozen
            else None
        )  # fmt: skip
        lead, tail = found or _event(event_name, event_attrs)
        parts += (lead, _Q.pack(at), tail)
    for link_trace, link_span, remote, _, link_attrs in links:
        lead, tail = _link(link_attrs, remote)
        parts += (
            lead, link_trace.to_bytes(16, "big"), _LINK_SPAN_FIELD, link_span.to_bytes(8, "big"),
            tail,
        )  # fmt: skip
    if error is None:
        parts.append(_STATUS_UNSET)
    else:
        status = _STATUS_CODE + bytes((STATUS_ERROR,))
        if error:
            status = _field(_STATUS_MESSAGE, error[:500].encode()) + status
        parts.append(_field(_SPAN_STATUS, status))
    parts.append(_FLAGS_ROOT if root else _FLAGS_REMOTE)
    return b"".join(parts)


class Siblings:
    """Spans of one trace under one parent, of one kind, whose attributes start with the
    same ones (a run's cue spans): the bytes `span` writes for them, with what they share
    written once. `attrs` given to `span` are the ones after `constant`, under other keys."""

    __slots__ = ("_constant", "_kind", "_parent", "_trace")

    def __init__(
        self, trace_id: int, parent_id: int, kind: SpanKind, constant: Mapping[str, Any]
    ) -> None:
        self._trace = _TRACE_FIELD + trace_id.to_bytes(16, "big") + _ID_FIELD
        self._parent = _PARENT_FIELD + parent_id.to_bytes(8, "big")
        self._kind = _KIND_START[kind]
        self._constant = attributes(_SPAN_ATTR, constant)

    def span(
        self, name: str, span_id: int, start_ns: int, end_ns: int, attrs: Mapping[str, Any],
        events: _Events, links: _Links, error: str | None,
    ) -> bytes:  # fmt: skip
        parts = [self._trace, span_id.to_bytes(8, "big"), self._parent]
        if name:
            parts += (_SPAN_NAME, _prefixed(name.encode()))
        parts += (
            self._kind, _TIMES.pack(start_ns, _SPAN_END, max(end_ns, start_ns)), self._constant,
            attributes(_SPAN_ATTR, attrs),
        )  # fmt: skip
        return _ending(parts, events, links, error, False)


class Shape:
    """Spans of one name and kind with no events, links or error, whose attributes start
    with the same ones (an `invoke_agent` span per execution): the bytes `span` writes for
    them, with what they share written once. `attrs` given to `span` are the ones after
    `constant`, under other keys."""

    def __init__(self, name: str, kind: SpanKind, constant: Mapping[str, Any]) -> None:
        named = (_SPAN_NAME + _prefixed(name.encode())) if name else b""
        self.head = named + _KIND_START[kind]
        self.constant = attributes(_SPAN_ATTR, constant)

    def span(
        self, trace_id: int, span_id: int, parent_id: int | None, start_ns: int, end_ns: int,
        attrs: Mapping[str, Any],
    ) -> bytes:  # fmt: skip
        parent = b"" if parent_id is None else _PARENT_FIELD + parent_id.to_bytes(8, "big")
        return b"".join((
            _TRACE_FIELD, trace_id.to_bytes(16, "big"), _ID_FIELD, span_id.to_bytes(8, "big"),
            parent, self.head, _TIMES.pack(start_ns, _SPAN_END, max(end_ns, start_ns)),
            self.constant, attributes(_SPAN_ATTR, attrs), _STATUS_UNSET,
            _FLAGS_ROOT if parent_id is None else _FLAGS_REMOTE,
        ))  # fmt: skip


class Request:
    """ExportTraceServiceRequest bytes for one process: its resource and scope, written
    once, around the spans of each batch."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        self.resource = _field(_RS_RESOURCE, attributes(_RESOURCE_ATTR, resource.attributes))
        self.resource_schema = (
            _field(_RS_SCHEMA, resource.schema_url.encode()) if resource.schema_url else b""
        )
        body = _field(_SCOPE_NAME, scope.name.encode()) if scope.name else b""
        if scope.version:
            body += _field(_SCOPE_VERSION, scope.version.encode())
        body += attributes(_SCOPE_ATTR, scope.attributes)
        self.scope = _field(_SS_SCOPE, body)
        self.scope_schema = (
            _field(_SS_SCHEMA, scope.schema_url.encode()) if scope.schema_url else b""
        )

    def __call__(self, spans: Sequence[bytes]) -> bytes:
        """The request carrying `spans` (each a Span's bytes, from `span`)."""
        scope_spans = b"".join((self.scope, *(_field(_SS_SPANS, s) for s in spans)))
        resource_spans = b"".join(
            (self.resource, _field(_RS_SCOPE_SPANS, scope_spans + self.scope_schema),
             self.resource_schema)
        )  # fmt: skip
        return _field(_REQUEST_RESOURCE_SPANS, resource_spans)
