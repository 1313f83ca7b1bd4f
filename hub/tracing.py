"""The hub's traces: a span per run and per cue attempt, one per message sent and routed.

An observer of the driver's commits; the engine knows nothing of it. Before a step's write
(`stamp`) each message of a run gets a PRODUCER span (OpenTelemetry messaging conventions,
`messaging.system=redis`) and its context as the envelope's `traceparent`; after it
(`committed`) the step's events open, annotate and end the cue spans, and a finished run
gets its span. What the router hands the engine gets a CONSUMER `process` span (`received`).

A run lives across many steps and, maybe, hubs: its trace id and the ids of its run and cue
spans derive from the run id (protocols.tracecontext), so a message can name its cue's span
before that span ends, and a hub that resumes a run after a restart or a change of leader
re-opens the span of a cue in flight under the same id, from the times in the cue's state.
The run span is made when the run ends, from the run's own start time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from hub.engine.outbox import Outbox
from hub.engine.state import CueRun, RunState
from protocols.codec import Envelope
from protocols.keys import HUB_GROUP, Keys
from protocols.settings import Settings
from protocols.states import CueState, RunStatus
from protocols.telemetry import AGENT, ATTEMPT, CUE_ID, MESSAGING_SYSTEM, RUN_ID, tracer_provider
from protocols.tracecontext import (
    cue_span_id,
    format_traceparent,
    parse_traceparent,
    run_span_id,
    run_trace_id,
)

if TYPE_CHECKING:
    from hub.engine.base import EngineBase

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
# Phases that are span events of a cue attempt, with the CueRun time each one started at
# (a re-opened span gets the ones that passed before this hub saw them).
_PHASES = (("warning", "warned_at"), ("standby", "standby_at"), ("go", "go_at"))
_ENDS = frozenset({CueState.COMPLETED, CueState.FAILED, CueState.CANCELLED, CueState.BLOCKED})


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class PinnedIds(IdGenerator):
    """Random ids, except the next one asked for when pinned: the run and cue spans, whose
    ids derive from the run id (one thread: the hub's event loop makes every span)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.trace_id: int | None = None
        self.span_id: int | None = None

    def generate_span_id(self) -> int:
        pinned, self.span_id = self.span_id, None
        return pinned if pinned is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        pinned, self.trace_id = self.trace_id, None
        return pinned if pinned is not None else self._random.generate_trace_id()


def _context(trace_id: int, span_id: int) -> Context:
    parent = SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED)
    return trace.set_span_in_context(NonRecordingSpan(parent))


class HubTracer:
    """The hub's spans (see the module doc). One per hub process, made only when tracing is on."""

    def __init__(self, provider: TracerProvider, ids: PinnedIds, keys: Keys) -> None:
        self.provider = provider
        self.ids = ids
        self.keys = keys
        self.tracer = provider.get_tracer("callboard.hub")
        self._cues: dict[tuple[str, str], tuple[int, Span]] = {}  # (run, cue) -> attempt, span
        self._sending: list[Span] = []

    @classmethod
    def from_settings(
        cls, settings: Settings, exporter: SpanExporter | None = None
    ) -> HubTracer | None:
        """The hub's tracer when tracing is on (or an exporter is given), else None."""
        if exporter is None and not settings.tracing_on:
            return None
        ids = PinnedIds()
        provider = tracer_provider(settings, "callboard-hub", exporter, id_generator=ids)
        return cls(provider, ids, settings.keys)

    def reset(self) -> None:
        """A new term: forget open spans unended (whoever leads re-opens them by their ids)."""
        self._cues.clear()
        self._sending.clear()

    def shutdown(self) -> None:
        self.provider.shutdown()

    # -- sending --------------------------------------------------------------------------
    def stamp(self, out: Outbox, engine: EngineBase) -> None:
        """Before the write: a producer span for each message of a run, its traceparent on
        the message (one span per envelope: its copies to several inboxes share it)."""
        if not out.messages:
            return
        streams: dict[int, list[str]] = {}
        for stream, msg in out.messages:
            streams.setdefault(id(msg), []).append(stream)
        stamped: dict[int, Envelope] = {}
        for _, msg in out.messages:
            if id(msg) not in stamped:
                stamped[id(msg)] = self._produce(msg, streams[id(msg)], engine)
        out.messages = [(stream, stamped[id(msg)]) for stream, msg in out.messages]

    def _produce(self, msg: Envelope, streams: list[str], engine: EngineBase) -> Envelope:
        run_id = msg.run_id
        if run_id is None:
            return msg
        attrs: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": streams[0],
            "messaging.message.id": msg.message_id,
            "messaging.batch.message_count": len(streams),
            RUN_ID: run_id,
        }
        parent = _context(run_trace_id(run_id), run_span_id(run_id))
        if msg.cue_id is not None:
            attempt = self._attempt(msg, engine)
            if attempt is not None:
                parent = _context(run_trace_id(run_id), cue_span_id(run_id, msg.cue_id, attempt))
                attrs[ATTEMPT] = attempt
            attrs[CUE_ID] = msg.cue_id
        span = self.tracer.start_span(
            f"send {msg.message_type.value}", context=parent, kind=SpanKind.PRODUCER,
            attributes=attrs, links=_links(msg),
        )  # fmt: skip
        self._sending.append(span)
        ctx = span.get_span_context()
        return msg.model_copy(update={"traceparent": format_traceparent(ctx.trace_id, ctx.span_id)})

    @staticmethod
    def _attempt(msg: Envelope, engine: EngineBase) -> int | None:
        attempt = getattr(msg.payload, "attempt", None)
        if isinstance(attempt, int) and attempt > 0:
            return attempt
        run = engine.runs.get(msg.run_id or "")
        cr = run.cues.get(msg.cue_id or "") if run is not None else None
        return cr.attempt if cr is not None and cr.attempt > 0 else None

    def failed(self, error: BaseException) -> None:
        """The write failed: what the producer spans sent was not sent."""
        for span in self._sending:
            span.set_status(Status(StatusCode.ERROR, f"state write failed: {error}"))
            span.end()
        self._sending.clear()

    # -- receiving ------------------------------------------------------------------------
    def received(self, messages: Sequence[Envelope], engine: EngineBase) -> list[Span]:
        """A CONSUMER `process` span per message routed to the engine, a child of its cue's
        span, linked to the sender's context (the specialist's span) when it sent one."""
        spans = []
        for msg in messages:
            run_id = msg.run_id
            if run_id is None:
                continue
            attempt = self._attempt(msg, engine) if msg.cue_id is not None else None
            if msg.cue_id is not None and attempt is not None:
                parent = _context(run_trace_id(run_id), cue_span_id(run_id, msg.cue_id, attempt))
            else:
                parent = _context(run_trace_id(run_id), run_span_id(run_id))
            attrs = {
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": self.keys.out(msg.from_agent),
                "messaging.consumer.group.name": HUB_GROUP,
                "messaging.message.id": msg.message_id,
                RUN_ID: run_id,
                AGENT: msg.from_agent,
            }
            if msg.cue_id is not None:
                attrs[CUE_ID] = msg.cue_id
            span = self.tracer.start_span(
                f"process {msg.message_type.value}", context=parent,
                kind=SpanKind.CONSUMER, attributes=attrs, links=_links(msg),
            )  # fmt: skip
            spans.append(span)
        return spans

    @staticmethod
    def processed(spans: list[Span], error: BaseException | None = None) -> None:
        for span in spans:
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, str(error)))
            span.end()

    # -- what the step did ----------------------------------------------------------------
    def committed(self, out: Outbox, engine: EngineBase) -> None:
        """After the write: end the producer spans, move the cue spans, end finished runs."""
        for span in self._sending:
            span.end()
        self._sending.clear()
        for run_id, event in out.events:
            run = engine.runs.get(run_id)
            if run is not None and not run.dry:
                self._event(run, event)
        for run_id in out.finished:
            run = engine.runs.get(run_id)
            if run is not None and not run.dry:
                self._end_run(run)

    def _event(self, run: RunState, event: dict[str, Any]) -> None:
        kind, cue_id = event.get("type"), event.get("cue")
        if cue_id is None or cue_id not in run.cues:
            return
        at = _ns(float(event.get("at", 0.0)))
        attempt = int(event.get("attempt") or run.cues[cue_id].attempt)
        if kind == "cue":
            state = CueState(event["state"])
            if state in (CueState.WARNING, CueState.STANDBY):
                span = self._cue_span(run, cue_id, attempt, at, state.value)
                span.add_event(state.value, timestamp=at)
            elif state in _ENDS and self._open(run.run_id, cue_id, attempt):
                span = self._cue_span(run, cue_id, attempt, at, state.value)
                span.add_event(state.value, {"reason": event.get("reason") or ""}, timestamp=at)
                if state is not CueState.COMPLETED:
                    span.set_status(Status(StatusCode.ERROR, event.get("reason") or state.value))
                span.set_attribute("callboard.cue.state", state.value)
                span.end(at)
                del self._cues[(run.run_id, cue_id)]
        elif kind == "go":
            span = self._cue_span(run, cue_id, attempt, at, "go")
            span.add_event("go", {"callboard.go.fired_by": event.get("fired_by", "")}, at)
        elif kind == "attempt_failed" and (run.run_id, cue_id) in self._cues:
            span = self._cue_span(run, cue_id, attempt, at)
            error = str(event.get("error") or "failed")
            span.add_event("failed", {"error": error}, timestamp=at)
            span.set_status(Status(StatusCode.ERROR, error))
        elif kind == "handoff" and (run.run_id, cue_id) in self._cues:
            span = self._cue_span(run, cue_id, attempt, at)
            span.add_event("handoff", {"callboard.handoff.to": event.get("to", "")}, at)

    def _open(self, run_id: str, cue_id: str, attempt: int) -> bool:
        """Was this attempt called (so it has a span, here or on the hub before)?"""
        held = self._cues.get((run_id, cue_id))
        return (held is not None and held[0] == attempt) or attempt > 0

    def _cue_span(self, run: RunState, cue_id: str, attempt: int, at: int, phase: str = "") -> Span:
        """The span of this attempt: open already, or opened now at `phase` (its first, or
        a later one when this hub did not see it start: after a restart or a change of
        leader); an older attempt's span ends here."""
        key = (run.run_id, cue_id)
        held = self._cues.get(key)
        if held is not None:
            if held[0] == attempt:
                return held[1]
            held[1].set_attribute("callboard.cue.state", "retried")
            held[1].end(at)
        cr = run.cues[cue_id]
        started: list[tuple[str, int]] = []
        if cr.attempt == attempt:  # the phases this attempt passed before `phase`
            for name, field in _PHASES:
                if name == phase:
                    break
                if (t := getattr(cr, field)) is not None:
                    started.append((name, _ns(t)))
        start = min([at, *(t for _, t in started)])
        self.ids.span_id = cue_span_id(run.run_id, cue_id, attempt)
        try:
            span = self.tracer.start_span(
                f"cue {cue_id}",
                context=_context(run_trace_id(run.run_id), run_span_id(run.run_id)),
                kind=SpanKind.INTERNAL, start_time=start,
                attributes=_cue_attributes(run, cue_id, cr, attempt),
            )  # fmt: skip
        finally:
            self.ids.span_id = None
        for name, t in started:  # re-opened: the phases that passed before this hub saw them
            span.add_event(name, {"callboard.resumed": True}, timestamp=t)
        self._cues[key] = (attempt, span)
        return span

    def _end_run(self, run: RunState) -> None:
        for key in [k for k in self._cues if k[0] == run.run_id]:
            _, span = self._cues.pop(key)
            span.set_attribute("callboard.cue.state", run.cues[key[1]].state.value)
            span.end()
        start = run.started_at or run.created_at
        end = run.completed_at or start
        attrs: dict[str, Any] = {
            RUN_ID: run.run_id, "callboard.cuelist": run.cuelist,
            "callboard.cuelist.version": run.version, "callboard.run.status": run.status.value,
            "callboard.run.cues": len(run.cues),
        }  # fmt: skip
        if run.rerun_of:
            attrs["callboard.run.rerun_of"] = run.rerun_of
        self.ids.trace_id, self.ids.span_id = run_trace_id(run.run_id), run_span_id(run.run_id)
        try:
            span = self.tracer.start_span(
                f"run {run.cuelist}", context=Context(), kind=SpanKind.INTERNAL,
                start_time=_ns(start), attributes=attrs,
            )  # fmt: skip
        finally:
            self.ids.trace_id = self.ids.span_id = None
        counts = run.counts()
        span.add_event(run.status.value, {k: v for k, v in counts.items()}, timestamp=_ns(end))
        if run.status is not RunStatus.SUCCESS:
            span.set_status(Status(StatusCode.ERROR, run.status.value))
        span.end(_ns(max(end, start)))


def _links(msg: Envelope) -> list[Link]:
    """A link to the context the message came with (a specialist's span), if any: a link,
    not a parent, since a specialist is not trusted to place the hub's spans."""
    if msg.traceparent is None:  # absent, or malformed and dropped by the codec
        return []
    trace_id, span_id, sampled = parse_traceparent(msg.traceparent)
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return [Link(SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags))]


def _cue_attributes(run: RunState, cue_id: str, cr: CueRun, attempt: int) -> dict[str, Any]:
    targets = sorted(cr.targets)
    return {
        RUN_ID: run.run_id,
        CUE_ID: cue_id,
        ATTEMPT: attempt,
        "callboard.cuelist": run.cuelist,
        "callboard.cue.targets": targets,
        "callboard.cue.fired_by": cr.fired_by.value if cr.fired_by else "",
    }
