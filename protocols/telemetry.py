"""Spans for one process (hub or specialist), when tracing is on: made as records, exported
by the OpenTelemetry SDK's batch processor.

callboard knows each span's ids, times and events by the time it ends, so it builds the
SDK's `ReadableSpan` once, at the end, and hands it to the batch processor: no live span
object, sampler or attribute checks per span (a quarter of the SDK's cost per span, which
is what kept tracing on within budget: bench/tracing.py). The exporter is the SDK's:
OTLP over HTTP (protobuf) to the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT (default
http://localhost:4318), the console with OTEL_TRACES_EXPORTER=console, or nowhere with
`none` (CALLBOARD_TRACING=1 still makes the spans and propagates their context). Building
this does no I/O: the processor exports from a thread of its own. Off, nothing here runs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from protocols.settings import Settings

__all__ = ["Event", "Link", "SpanKind", "Spans"]

# Span attribute and name words both sides use (OpenTelemetry semantic conventions:
# messaging, GenAI agents; callboard's own under `callboard.`).
MESSAGING_SYSTEM = "redis"
RUN_ID = "callboard.run.id"
CUE_ID = "callboard.cue.id"
ATTEMPT = "callboard.cue.attempt"
AGENT = "callboard.agent"
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_OK = Status(StatusCode.UNSET)
_random = random.Random()


def new_span_id() -> int:
    return _random.getrandbits(64) or 1


def new_trace_id() -> int:
    return _random.getrandbits(128) or 1


class Spans:
    """Where this process's spans go: `emit` an ended span, `flush`, `shutdown`."""

    def __init__(self, settings: Settings, service: str, exporter: SpanExporter | None = None):
        name = settings.otel_service_name or service
        self.resource = Resource.create({"service.name": name})
        self.scope = InstrumentationScope("callboard")
        self.processor = BatchSpanProcessor(exporter or _configured_exporter(settings))

    def emit(
        self, name: str, trace_id: int, span_id: int, parent_id: int | None, kind: SpanKind,
        start_ns: int, end_ns: int, attributes: dict[str, Any],
        events: Sequence[Event] = (), links: Sequence[Link] = (), error: str | None = None,
    ) -> None:  # fmt: skip
        """Export one ended span (after the processor's batch delay)."""
        parent = None if parent_id is None else SpanContext(trace_id, parent_id, True, SAMPLED)
        span = ReadableSpan(
            name, SpanContext(trace_id, span_id, False, SAMPLED), parent, self.resource,
            attributes, events, links, kind,
            status=_OK if error is None else Status(StatusCode.ERROR, error[:500]),
            start_time=start_ns, end_time=max(end_ns, start_ns), instrumentation_scope=self.scope,
        )  # fmt: skip
        self.processor.on_end(span)

    def flush(self) -> None:
        self.processor.force_flush()

    def shutdown(self) -> None:
        self.processor.shutdown()  # type: ignore[no-untyped-call]


class Dropped(SpanExporter):
    """OTEL_TRACES_EXPORTER=none with CALLBOARD_TRACING=1: spans are made and the context
    propagates (to messages, to the http and a2a kinds' calls), but nothing is exported."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _configured_exporter(settings: Settings) -> SpanExporter:
    kind = (settings.otel_traces_exporter or "otlp").strip().lower()
    if kind == "none":
        return Dropped()
    if kind == "console":
        return ConsoleSpanExporter()
    if kind != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={kind!r}: callboard exports otlp or console")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout)
