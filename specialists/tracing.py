"""A specialist's traces: an `invoke_agent` span around each `execute`, continuing the hub's.

The span (OpenTelemetry GenAI agent conventions: `gen_ai.operation.name=invoke_agent`,
`gen_ai.agent.name`) is a child of the context the hub put on the GO or task.assign, and
the replies written while it is open carry its context as their `traceparent`; the `http`
and `a2a` kinds pass it on as a W3C `traceparent` header. Made only when tracing is on
(`Settings.tracing_on`): otherwise this module is not imported.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpx
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from protocols.codec import Envelope
from protocols.settings import Settings
from protocols.telemetry import ATTEMPT, CUE_ID, RUN_ID, Spans, new_span_id, new_trace_id
from protocols.tracecontext import format_traceparent, parse_traceparent


@dataclass
class _Work:
    """The `invoke_agent` span open in this task."""

    traceparent: str
    error: str | None = None


_WORK: ContextVar[_Work | None] = ContextVar("callboard_work", default=None)


def current_traceparent() -> str | None:
    """The traceparent of the span open in this task, if any."""
    work = _WORK.get()
    if work is not None:
        return work.traceparent
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
    def __init__(self, spans: Spans, agent_id: str, replica: str) -> None:
        self.spans = spans
        self.agent_id = agent_id
        self.replica = replica

    @classmethod
    def from_settings(
        cls, settings: Settings, agent_id: str, replica: str, exporter: SpanExporter | None = None
    ) -> SpecialistTracer:
        return cls(Spans(settings, agent_id, exporter), agent_id, replica)

    @contextmanager
    def invoke(self, message: Envelope, cue_id: str, attempt: int, kind: str) -> Iterator[None]:
        """The `invoke_agent` span of one execution: current while the block runs (an
        OpenTelemetry span the author's own code starts is its child, and the propagator
        puts it on outgoing calls), emitted when the block ends."""
        sampled = True
        if message.traceparent is not None:  # absent, or malformed and dropped by the codec
            trace_id, parent_id, sampled = parse_traceparent(message.traceparent)
        else:
            trace_id, parent_id = new_trace_id(), None
        span_id = new_span_id()
        flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        ctx = SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags)
        work = _Work(format_traceparent(trace_id, span_id, sampled))
        token = _WORK.set(work)
        attached = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(ctx)))
        start = time.time_ns()
        try:
            yield
        except BaseException as exc:
            work.error = work.error or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            end = time.time_ns()
            otel_context.detach(attached)
            _WORK.reset(token)
            if sampled:
                attrs: dict[str, Any] = {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": self.agent_id,
                    CUE_ID: cue_id,
                    ATTEMPT: attempt,
                }
                if message.run_id is not None:
                    attrs[RUN_ID] = message.run_id
                self.spans.emit(
                    f"invoke_agent {self.agent_id}", trace_id, span_id, parent_id,
                    SpanKind.INTERNAL, start, end, attrs, error=work.error,
                )  # fmt: skip

    @staticmethod
    def failed(error: str) -> None:
        """The work of the open span failed (reported as status.failed)."""
        work = _WORK.get()
        if work is not None:
            work.error = error

    def shutdown(self) -> None:
        self.spans.shutdown()
