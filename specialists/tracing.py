"""A specialist's traces: an `invoke_agent` span around each `execute`, continuing the hub's.

The span (OpenTelemetry GenAI agent conventions: `gen_ai.operation.name=invoke_agent`,
`gen_ai.agent.name`) is a child of the context the hub put on the GO or task.assign, and
the replies written while it is open carry its context as their `traceparent`; the `http`
and `a2a` kinds pass it on as a W3C `traceparent` header. Made only when tracing is on
(`Settings.tracing_on`): otherwise this module is not imported.

For the OpenTelemetry API the span is current while `execute` runs, without an OpenTelemetry
context made, attached and detached per execution: the specialist's tasks inherit one
context (`SpecialistTracer.install`) whose current span stands for the work running in
the task reading it (`_WORK`), and for nothing (the invalid span) outside any work.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any

import httpx
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan

from protocols import otlp
from protocols.codec import Envelope
from protocols.settings import Settings
from protocols.telemetry import (
    ATTEMPT,
    CUE_ID,
    RUN_ID,
    SAMPLED,
    UNSAMPLED,
    SpanContext,
    SpanKind,
    Spans,
    new_span_id,
    new_trace_id,
)
from protocols.tracecontext import format_traceparent, parse_traceparent

_WORK: ContextVar[_Invocation | None] = ContextVar("callboard_work", default=None)
# Is `_CURRENT` in this task's OpenTelemetry context (installed)? If not, an execution
# attaches it for its own block.
_INSTALLED: ContextVar[bool] = ContextVar("callboard_otel_current", default=False)


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
        self.span_name = f"invoke_agent {agent_id}"
        self.agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent_id}
        # what every span shares, written once, when spans are exported as OTLP bytes
        self.shape = (
            otlp.Shape(self.span_name, SpanKind.INTERNAL, self.agent) if spans.encoded else None
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, agent_id: str, replica: str, exporter: SpanExporter | None = None
    ) -> SpecialistTracer:
        return cls(Spans(settings, agent_id, exporter), agent_id, replica)

    def invoke(self, message: Envelope, cue_id: str, attempt: int, kind: str) -> _Invocation:
        """The `invoke_agent` span of one execution, as a context manager: current while
        the block runs (an OpenTelemetry span the author's own code starts is its child,
        and the propagator puts it on outgoing calls), emitted when the block ends."""
        return _Invocation(self, message, cue_id, attempt)

    current_traceparent = staticmethod(current_traceparent)

    @staticmethod
    def failed(error: str) -> None:
        """The work of the open span failed (reported as status.failed)."""
        work = _WORK.get()
        if work is not None:
            work.error = error

    def shutdown(self) -> None:
        self.spans.shutdown()

    @staticmethod
    def install() -> Token[otel_context.Context]:
        """Make the work's span OpenTelemetry's current span in this task and the tasks it
        starts from now on (the runtime's, before they start); `uninstall` with the token."""
        token = _attach_current()
        _INSTALLED.set(True)
        return token

    @staticmethod
    def uninstall(token: Token[otel_context.Context]) -> None:
        _INSTALLED.set(False)
        otel_context.detach(token)


class _Work(NonRecordingSpan):
    """OpenTelemetry's current span in a specialist's tasks: the `invoke_agent` span of the
    work running in the task that asks (the parent of a span the author's own code starts,
    what the propagator puts on outgoing calls), else the invalid span's context, as when
    nothing is current."""

    def __init__(self) -> None:  # not NonRecordingSpan's: its context is the work's
        pass

    def get_span_context(self) -> SpanContext:
        work = _WORK.get()
        return INVALID_SPAN_CONTEXT if work is None else work.span_context()

    def __repr__(self) -> str:
        return f"NonRecordingSpan({self.get_span_context()!r})"


_CURRENT = _Work()


def _attach_current() -> Token[otel_context.Context]:
    """Make `_CURRENT` OpenTelemetry's current span here (until detached)."""
    return otel_context.attach(trace.set_span_in_context(_CURRENT))


class _Invocation:
    """One `invoke_agent` span, open while its `with` block runs (SpecialistTracer.invoke)."""

    __slots__ = (
        "_attached", "_context", "_ids", "_start", "_work", "attempt", "cue_id", "error",
        "message", "traceparent", "tracer",
    )  # fmt: skip

    def __init__(self, tracer: SpecialistTracer, message: Envelope, cue_id: str, attempt: int):
        self.tracer = tracer
        self.message = message
        self.cue_id = cue_id
        self.attempt = attempt
        self.traceparent = ""  # this span's context, for the replies written meanwhile
        self.error: str | None = None
        self._context: SpanContext | None = None  # for the OpenTelemetry API, when asked

    def __enter__(self) -> None:
        parent = self.message.traceparent  # absent, or malformed and dropped by the codec
        span_id = new_span_id()
        sampler = self.tracer.spans.sampler
        if parent is not None:
            trace_id, parent_id, flagged = parse_traceparent(parent)
            sampled = sampler.decide(trace_id, flagged)
            # the parent's trace id, this span's id, the sampled flag
            self.traceparent = f"{parent[:36]}{span_id:016x}{'-01' if sampled else '-00'}"
        else:
            trace_id, parent_id = new_trace_id(), None
            sampled = sampler.decide(trace_id, None)
            self.traceparent = format_traceparent(trace_id, span_id, sampled)
        self._ids = trace_id, span_id, parent_id, sampled
        self._work: Token[_Invocation | None] = _WORK.set(self)
        self._attached: Token[otel_context.Context] | None = None
        if not _INSTALLED.get():  # outside the runtime's tasks (a test's, a tool's own)
            self._attached = _attach_current()
        self._start = time.time_ns()

    def span_context(self) -> SpanContext:
        """This span as the OpenTelemetry API sees it."""
        if self._context is None:
            trace_id, span_id, _, sampled = self._ids
            self._context = SpanContext(trace_id, span_id, False, SAMPLED if sampled else UNSAMPLED)
        return self._context

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        end = time.time_ns()
        if self._attached is not None:
            otel_context.detach(self._attached)
        _WORK.reset(self._work)
        if exc is not None:
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        trace_id, span_id, parent_id, sampled = self._ids
        if not sampled:
            return
        tracer, run_id = self.tracer, self.message.run_id
        attrs: dict[str, Any] = {CUE_ID: self.cue_id, ATTEMPT: self.attempt}
        if run_id is not None:
            attrs[RUN_ID] = run_id
        if tracer.shape is not None and self.error is None:  # most: written here, at once
            span = tracer.shape.span(trace_id, span_id, parent_id, self._start, end, attrs)
            tracer.spans.emit_encoded(span)
            return
        tracer.spans.emit(
            tracer.span_name, trace_id, span_id, parent_id, SpanKind.INTERNAL, self._start, end,
            tracer.agent | attrs, error=self.error,
        )  # fmt: skip
