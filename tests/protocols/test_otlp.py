"""protocols.otlp writes, from a span record, the request the SDK's OTLP encoder builds
from the same span: both are parsed and compared as protobuf messages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind

from protocols import otlp
from protocols.settings import Settings
from protocols.telemetry import Spans
from tests.webserver import collecting_traces

IDS64 = st.integers(min_value=1, max_value=2**64 - 1)
IDS128 = st.integers(min_value=1, max_value=2**128 - 1)
NANOS = st.integers(min_value=0, max_value=2**63)
TEXT = st.text(max_size=12)
LONG = st.text(st.characters(max_codepoint=127), min_size=122, max_size=130)  # around a
# length that takes a second byte (the AnyValue 128 bytes and up)
SCALARS = st.one_of(
    st.none(), st.booleans(), TEXT, LONG, st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.binary(max_size=8),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(tuple), st.dictionaries(TEXT, inner, max_size=3)
    ),
    max_leaves=6,
)
ATTRS = st.dictionaries(TEXT, VALUES, max_size=4)
EVENTS = st.lists(st.tuples(TEXT, st.one_of(st.none(), ATTRS), NANOS), max_size=3)
LINKS = st.lists(
    st.tuples(IDS128, IDS64, st.booleans(), st.booleans(), st.one_of(st.none(), ATTRS)),
    max_size=3,
)
RECORDS = st.tuples(
    TEXT, IDS128, IDS64, st.one_of(st.none(), IDS64), st.sampled_from(list(SpanKind)),
    NANOS, NANOS, ATTRS, EVENTS, LINKS, st.one_of(st.none(), st.text(max_size=600)),
)  # fmt: skip


class Kept:
    """An exporter that only keeps what it is given (never called: spans are built here)."""

    def export(self, spans: Any) -> Any:
        raise AssertionError


def _both(records: list[Any], resource: Resource) -> tuple[Any, Any]:
    spans = Spans(Settings(), "svc", Kept())  # type: ignore[arg-type]
    spans.resource = resource
    try:
        sdk = encode_spans([spans._span(r) for r in records])
    finally:
        spans._stopped = True
    request = otlp.Request(resource, spans.scope)
    ours = ExportTraceServiceRequest.FromString(request([otlp.span(*r) for r in records]))
    return ours, sdk


@settings(max_examples=300, deadline=None)
@given(records=st.lists(RECORDS, min_size=1, max_size=4), resource=ATTRS)
def test_a_request_is_the_message_the_sdks_encoder_builds(
    records: list[Any], resource: dict[str, Any]
) -> None:
    ours, sdk = _both(records, Resource.create({"service.name": "svc", **resource}))
    assert ours == sdk


def test_the_spans_callboard_makes_encode_as_the_sdk_encodes_them() -> None:
    trace_id, run_span = 0x0AF7651916CD43DD8448EB211C80319C, 0x1234
    cue = (
        "cue C00001", trace_id, 0x99, run_span, SpanKind.INTERNAL, 10, 25,
        {"callboard.run.id": "r1", "callboard.cue.id": "C00001", "callboard.cue.attempt": 1},
        [("go", {"callboard.go.fired_by": None}, 11), ("failed", {"error": "boom"}, 20)],
        [(trace_id, 0x77, True, False, {"messaging.system": "redis"})], "boom",
    )  # fmt: skip
    run: Any = ("run chain", trace_id, run_span, None, SpanKind.INTERNAL, 5, 30, {}, [], [], None)
    send: Any = ("send", trace_id, 0x55, run_span, SpanKind.PRODUCER, 12, 12, {"n": 2}, [], [])
    send += (None,)
    ours, sdk = _both([cue, run, send], Resource.create({"service.name": "callboard-hub"}))
    assert ours == sdk
    (span, *_) = ours.resource_spans[0].scope_spans[0].spans
    assert span.name == "cue C00001" and span.status.message == "boom"
    assert ours.resource_spans[0].scope_spans[0].scope.name == "callboard"


def test_an_attribute_the_sdk_cannot_encode_is_left_out_not_the_span() -> None:
    attrs = {"ok": 1, "too big": 2**80, "odd": object(), "surrogate": "\ud800", "fine": "x"}
    record: Any = ("s", 1, 2, None, SpanKind.INTERNAL, 1, 2, attrs, [], [], None)
    ours, sdk = _both([record], Resource.create({}))
    assert ours == sdk
    assert [kv.key for kv in ours.resource_spans[0].scope_spans[0].spans[0].attributes] == [
        "ok", "fine",
    ]  # fmt: skip


def test_spans_go_to_an_otlp_collector_as_the_requests_written_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The configured OTLP/HTTP exporter sends what protocols.otlp wrote (the SDK's HTTP
    client, not its encoder); if an SDK upgrade took away that seam, `encoded` says so."""
    with collecting_traces(monkeypatch) as bodies:
        spans = Spans(Settings(otel_bsp_schedule_delay_ms=60_000), "callboard-hub")
        try:
            assert spans.encoded
            for i in range(3):
                spans.emit(f"cue C{i}", 7, 100 + i, 1, SpanKind.INTERNAL, 5, 9, {"i": i})
            spans.flush()
        finally:
            spans.shutdown()
    (body,) = bodies
    (resource_spans,) = ExportTraceServiceRequest.FromString(body).resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert service["service.name"] == "callboard-hub"
    sent = resource_spans.scope_spans[0].spans
    assert [(s.name, int.from_bytes(s.span_id, "big")) for s in sent] == [
        ("cue C0", 100), ("cue C1", 101), ("cue C2", 102),
    ]  # fmt: skip
    assert Spans(Settings(otel_traces_exporter="none"), "svc").encoded


@settings(max_examples=200, deadline=None)
@given(
    name=TEXT, kind=st.sampled_from(list(SpanKind)), ids=st.tuples(IDS128, IDS64),
    parent=st.one_of(st.none(), IDS64), times=st.tuples(NANOS, NANOS), constant=ATTRS,
    attrs=ATTRS,
)  # fmt: skip
def test_a_shape_writes_the_bytes_span_writes(
    name: str, kind: SpanKind, ids: tuple[int, int], parent: int | None,
    times: tuple[int, int], constant: dict[str, Any], attrs: dict[str, Any],
) -> None:  # fmt: skip
    """An `invoke_agent` span written from its shape (what every one shares written once)
    is byte for byte the span `span` writes from the whole record."""
    attrs = {k: v for k, v in attrs.items() if k not in constant}
    shape = otlp.Shape(name, kind, constant)
    record: Any = (name, *ids, parent, kind, *times, {**constant, **attrs}, (), (), None)
    assert shape.span(*ids, parent, *times, attrs) == otlp.span(*record)


@settings(max_examples=200, deadline=None)
@given(
    name=TEXT, kind=st.sampled_from(list(SpanKind)), ids=st.tuples(IDS128, IDS64, IDS64),
    times=st.tuples(NANOS, NANOS), constant=ATTRS, attrs=ATTRS, events=EVENTS, links=LINKS,
    error=st.one_of(st.none(), st.text(max_size=600)),
)  # fmt: skip
def test_siblings_write_the_bytes_span_writes(
    name: str, kind: SpanKind, ids: tuple[int, int, int], times: tuple[int, int],
    constant: dict[str, Any], attrs: dict[str, Any], events: Any, links: Any, error: str | None,
) -> None:  # fmt: skip
    """A run's cue span written from what the run's cue spans share (their trace, their
    parent, the run's id) is byte for byte the span `span` writes from the whole record."""
    trace_id, span_id, parent = ids
    attrs = {k: v for k, v in attrs.items() if k not in constant}
    siblings = otlp.Siblings(trace_id, parent, kind, constant)
    record: Any = (name, trace_id, span_id, parent, kind, *times, {**constant, **attrs})
    record += (events, links, error)
    assert siblings.span(name, span_id, *times, attrs, events, links, error) == otlp.span(*record)


@settings(max_examples=200, deadline=None)
@given(attrs=ATTRS)
def test_frozen_attributes_are_written_as_the_same_dict_is(attrs: dict[str, Any]) -> None:
    frozen = otlp.Frozen(attrs)
    assert dict(frozen) == attrs
    for tag in (b"\x4a", b"\x1a", b"\x22"):  # a span's, an event's, a link's
        assert otlp.attributes(tag, frozen) == otlp.attributes(tag, attrs)
        assert otlp.attributes(tag, frozen) == otlp.attributes(tag, attrs)  # kept, the same


def test_frozen_attributes_encode_as_the_sdk_encodes_them() -> None:
    """Shared event and link attributes (the hub's) go through the SDK's spans too."""
    fired, process = otlp.Frozen({"callboard.go.fired_by": "auto"}), otlp.Frozen({"m": "x"})
    record: Any = (
        "cue C", 7, 9, 1, SpanKind.INTERNAL, 10, 25, {"callboard.cue.attempt": 1},
        [("go", fired, 11)], [(7, 0x77, True, True, process)], None,
    )  # fmt: skip
    ours, sdk = _both([record, record], Resource.create({}))
    assert ours == sdk
    (span, _) = ours.resource_spans[0].scope_spans[0].spans
    assert span.events[0].attributes[0].value.string_value == "auto"
