"""A specialist's traces: an `invoke_agent` span around each `execute`, continuing the hub's.

The span (OpenTelemetry GenAI agent conventions: `gen_ai.operation.name=invoke_agent`,
`gen_ai.agent.name`) is a child of the context the hub put on the GO or task.assign, and
the replies written while it is open carry its context as their `traceparent`; the `http`
and `a2a` kinds pass it on as a W3C `traceparent` header. Made only when tracing is on
(`Settings.tracing_on`): otherwise OpenTelemetry is not even imported.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from protocols.codec import Envelope
from protocols.settings import Settings
from protocols.telemetry import AGENT, ATTEMPT, CUE_ID, RUN_ID, tracer_provider
from protocols.tracecontext import format_traceparent, parse_traceparent


def incoming(message: Envelope) -> Context:
    """The context the hub sent with `message` (empty when it sent none)."""
    if message.traceparent is None:  # absent, or malformed and dropped by the codec
        return Context()
    trace_id, span_id, sampled = parse_traceparent(message.traceparent)
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    remote = SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(remote))


def current_traceparent() -> str | None:
    """The traceparent of the span open in this task, if any."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return format_traceparent(ctx.trace_id, ctx.span_id, ctx.trace_flags.sampled)


async def trace_request(request: httpx.Request) -> None:
    """An httpx request hook: the current trace context as a W3C `traceparent` header (the
    OpenTelemetry propagator's), so the called service continues the run's trace. Nothing
    is added outside a span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    request.headers.update(carrier)


def request_hooks(tracer: SpecialistTracer | None) -> dict[str, list[Any]]:
    """httpx `event_hooks` for a specialist's outgoing calls: none when tracing is off."""
    return {"request": [trace_request]} if tracer is not None else {}


class SpecialistTracer:
    def __init__(self, provider: TracerProvider, agent_id: str, replica: str) -> None:
        self.provider = provider
        self.agent_id = agent_id
        self.replica = replica
        self.tracer = provider.get_tracer("callboard.specialist")

    @classmethod
    def from_settings(
        cls, settings: Settings, agent_id: str, replica: str, exporter: SpanExporter | None = None
    ) -> SpecialistTracer:
        return cls(tracer_provider(settings, agent_id, exporter), agent_id, replica)

    @contextmanager
    def invoke(self, message: Envelope, cue_id: str, attempt: int, kind: str) -> Iterator[None]:
        """The `invoke_agent` span of one execution, current while the block runs."""
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.agent_id,
            "gen_ai.agent.id": f"{self.agent_id}/{self.replica}",
            AGENT: self.agent_id,
            "callboard.agent.kind": kind,
            CUE_ID: cue_id,
            ATTEMPT: attempt,
            "messaging.message.id": message.message_id,
        }
        if message.run_id is not None:
            attrs[RUN_ID] = message.run_id
        with self.tracer.start_as_current_span(
            f"invoke_agent {self.agent_id}", context=incoming(message), kind=SpanKind.INTERNAL,
            attributes=attrs,
        ):  # fmt: skip
            yield

    @staticmethod
    def failed(error: str) -> None:
        """The work of the open span failed (reported as status.failed)."""
        trace.get_current_span().set_status(trace.Status(trace.StatusCode.ERROR, error[:500]))

    def shutdown(self) -> None:
        self.provider.shutdown()
