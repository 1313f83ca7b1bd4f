"""The OpenTelemetry SDK set up for one process (hub or specialist), when tracing is on.

Shared by both sides so they export alike. Building the provider does no I/O: its batch
processor exports from a thread of its own, over OTLP/HTTP (protobuf) to the standard
OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT (default http://localhost:4318), or to the console
with OTEL_TRACES_EXPORTER=console. When tracing is off nothing here is called.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

from protocols.settings import Settings

# Span attribute and name words both sides use (OpenTelemetry semantic conventions:
# messaging, GenAI agents; callboard's own under `callboard.`).
MESSAGING_SYSTEM = "redis"
RUN_ID = "callboard.run.id"
CUE_ID = "callboard.cue.id"
ATTEMPT = "callboard.cue.attempt"
AGENT = "callboard.agent"


def tracer_provider(
    settings: Settings,
    service: str,
    exporter: SpanExporter | None = None,
    id_generator: IdGenerator | None = None,
) -> TracerProvider:
    """A provider exporting in batches: to `exporter`, else as OTEL_TRACES_EXPORTER says."""
    resource = Resource.create({"service.name": settings.otel_service_name or service})
    provider = TracerProvider(resource=resource, id_generator=id_generator or RandomIdGenerator())
    if exporter is None:
        exporter = _configured_exporter(settings)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _configured_exporter(settings: Settings) -> SpanExporter:
    kind = (settings.otel_traces_exporter or "otlp").strip().lower()
    if kind == "console":
        return ConsoleSpanExporter()
    if kind != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={kind!r}: callboard exports otlp or console")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout)
