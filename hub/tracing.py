"""The hub's traces: a span per run and per cue attempt, a PRODUCER span per write it sends.

An observer of the driver's commits; the engine knows nothing of it. Before a step's write
(`stamp`) each message of a run gets its cue span's context as its `traceparent`, and the
step's messages of each run one PRODUCER `send` span (OpenTelemetry messaging conventions,
`messaging.system=redis`: a batch send, linked to the cue spans it carries messages of).
After the write (`committed`) the step's events open, annotate and end the cue spans, and a
finished run gets its span. What the router hands the engine (`received`) links its cue
span to the sender's context: a specialist's `invoke_agent` span.

A run lives across many steps and, maybe, hubs: its trace id and the ids of its run and
cue spans derive from the run id (protocols.tracecontext), so a message names its cue's
span before that span ends, and a hub that resumes a run after a restart or a change of
leader re-opens the span of a cue in flight under the same id, with the phases it missed
taken from the cue's state. Spans are records here, emitted once they end
(protocols.telemetry); the run's span is emitted when the run ends, from its start time.
A cue span exported as OTLP is written as its bytes when it ends, from what its run's cue
spans share (their trace, parent and run id: `otlp.Siblings`, kept while the run is).
A run the sampler leaves out (protocols.telemetry.Sampler, by its trace id) has no span;
its messages carry its context flagged unsampled, so no specialist records its work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace.export import SpanExporter

from hub.engine import guard
from hub.engine.outbox import Outbox
from hub.engine.state import RunState
from protocols.codec import Envelope
from protocols.otlp import Frozen, Siblings
from protocols.settings import Settings
from protocols.states import CueState, RunStatus
from protocols.telemetry import (
    ATTEMPT,
    CUE_ID,
    MESSAGING_SYSTEM,
    RUN_ID,
    EventRecord,
    LinkRecord,
    SpanKind,
    Spans,
    new_span_id,
)
from protocols.tracecontext import (
    cue_span_id,
    parse_traceparent,
    run_span_id,
    run_trace_id,
    trace_context,
)

if TYPE_CHECKING:
    from hub.engine.base import EngineBase
    from hub.engine.core import Engine

# Phases that are span events of a cue attempt, with the CueRun time each one started at
# (a re-opened span gets the ones that passed before this hub saw them).
_PHASES = (("warning", "warned_at"), ("standby", "standby_at"), ("go", "go_at"))
_BEFORE = {name: _PHASES[:i] for i, (name, _) in enumerate(_PHASES)}  # else: all of them
_ENDS = frozenset({CueState.COMPLETED, CueState.FAILED, CueState.CANCELLED, CueState.BLOCKED})
# the states a cue's span shows (GO: its own "go" event), as strings: an enum member's
# hash and `.value` are Python code, a str's are not
_CALLED = frozenset(str(s) for s in _ENDS | {CueState.WARNING, CueState.STANDBY})
_WARNED = frozenset({str(CueState.WARNING), str(CueState.STANDBY)})
_COMPLETED = str(CueState.COMPLETED)
_TRACED = frozenset({"cue", "go", "attempt_failed", "handoff"})  # the events spans use
# attributes many spans share, written once (protocols.otlp.Frozen)
_PROCESS_LINK = Frozen(
    {"messaging.system": MESSAGING_SYSTEM, "messaging.operation.type": "process"}
)
_RESUMED = Frozen({"callboard.resumed": True})
_RERUN_OF = Frozen({"callboard.link": "rerun_of"})
_FIRED_BY: dict[Any, Frozen] = {}  # a GO's `fired_by` -> its attributes
MAX_FIRED_BY = 256  # distinct values kept (past this, the cache starts again)
MAX_LINKS = 128  # per span, as the SDK's default OTEL_SPAN_LINK_COUNT_LIMIT
MAX_FAMILIES = 4096  # runs whose cue spans' shared bytes are kept (past this, start again)
log = logging.getLogger(__name__)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


@dataclass(slots=True)
class _Cue:
    """The span of one cue attempt, open: emitted when the attempt ends. Its attributes
    are its cue's id, its attempt and, when it ended other than completed, `state`."""

    attempt: int
    span_id: int
    start_ns: int
    events: list[EventRecord]
    links: list[LinkRecord] | None = None  # made with the first (most cues have one or none)
    linked: str | None = None  # the traceparent of the last link made
    error: str | None = None
    state: str | None = None  # `callboard.cue.state`: how it ended, when not completed


@dataclass(slots=True)
class _Batch:
    """What one step sends for one run: one `send` span."""

    count: int = 0
    streams: set[str] = field(default_factory=set)
    cues: set[int] = field(default_factory=set)  # span ids of the cues to link
    links: list[LinkRecord] = field(default_factory=list)  # the senders' of forwarded messages


class HubTracer:
    """The hub's spans (see the module doc). One per hub process, made only when tracing is on."""

    def __init__(self, spans: Spans) -> None:
        self.spans = spans
        self.sampler = spans.sampler
        self._cues: dict[str, dict[str, _Cue]] = {}  # run id -> cue id -> its open span
        self._sending: list[tuple[str, int, _Batch]] = []  # run id, start, batch: this write's
        # (run id, cue id, attempt) -> span id, derived for this write's messages: the span
        # its step opens takes it (no cache outlives the write for the collector to rescan)
        self._derived: dict[tuple[str, str, int], int] = {}
        self._families: dict[str, Siblings] = {}  # run id -> its cue spans' shared bytes
        self._encoded = spans.encoded  # cue spans written as their bytes (else the SDK's)

    @classmethod
    def from_settings(
        cls, settings: Settings, exporter: SpanExporter | None = None
    ) -> HubTracer | None:
        """The hub's tracer when tracing is on (or an exporter is given), else None."""
        if exporter is None and not settings.tracing_on:
            return None
        return cls(Spans(settings, "callboard-hub", exporter))

    def reset(self) -> None:
        """A new term: forget open spans unended (whoever leads re-opens them by their ids)."""
        self._cues.clear()
        self._sending.clear()
        self._derived.clear()
        self._families.clear()

    def shutdown(self) -> None:
        self.spans.shutdown()

    # -- sending --------------------------------------------------------------------------
    def stamp(self, out: Outbox, engine: EngineBase) -> None:
        """Before the write: each message of a run carries the context of its cue's span
        (its creation context: the cue's step made it) as its traceparent, and one PRODUCER
        `send` span per run covers the step's messages (a batch send: its message count,
        and a link to each cue span it carries messages of). A span per message would cost
        the hub as much as the message itself (bench/tracing.py).

        The traceparent goes in `out.traceparents`, added to the message as it is encoded
        (hub.store.commit): a copy of each envelope cost more than the rest of tracing."""
        if not out.messages:
            return
        batches: dict[str, _Batch | None] = {}  # None: a run the sampler leaves out
        traced = out.traceparents
        copies: dict[int, Envelope] = {}  # of messages that came with a traceparent
        for stream, msg in out.messages:
            run_id = msg.run_id
            if run_id is None:  # broadcasts, runless handoffs: outside any trace
                continue
            if run_id in batches:
                batch = batches[run_id]
            else:
                batch = batches[run_id] = _Batch() if self.recorded(run_id) else None
            if batch is not None:
                batch.count += 1
                batch.streams.add(stream)
            key = id(msg)
            if key in traced or key in copies:  # the same message to another inbox
                continue
            traceparent = self._traceparent(msg, run_id, engine, batch)
            if msg.traceparent is None:
                traced[key] = traceparent
            else:  # a forwarded handoff: the sender's context is replaced
                copies[key] = msg.model_copy(update={"traceparent": traceparent})
        if copies:
            out.messages = [(stream, copies.get(id(msg), msg)) for stream, msg in out.messages]
        now = time.time_ns()
        self._sending.extend(
            (run_id, now, batch) for run_id, batch in batches.items() if batch is not None
        )

    def recorded(self, run_id: str) -> bool:
        """Does the sampler keep this run's trace? (Every hub decides the same: by its id.)"""
        return self.sampler.everything or self.sampler.root(run_trace_id(run_id))

    def _traceparent(
        self, msg: Envelope, run_id: str, engine: EngineBase, batch: _Batch | None
    ) -> str:
        """The message's creation context: its cue attempt's span, else the run's; flagged
        unsampled when the sampler leaves the run out (`batch` None: no span opens, but
        the ids are the ones its spans would have)."""
        if batch is not None and msg.traceparent is not None and len(batch.links) < MAX_LINKS:
            batch.links.extend(_links(msg))  # a forwarded handoff: from the sender's span
        cue_id = msg.cue_id
        attempt = self._attempt(msg, engine) if cue_id is not None else None
        if cue_id is None or attempt is None:
            return trace_context(run_id, run_span_id(run_id), sampled=batch is not None)
        if batch is None:
            return trace_context(run_id, cue_span_id(run_id, cue_id, attempt), sampled=False)
        held = self._open(run_id, cue_id)
        if held is not None and held.attempt == attempt:
            span_id = held.span_id
        else:
            span_id = self._derived[run_id, cue_id, attempt] = cue_span_id(run_id, cue_id, attempt)
        if len(batch.cues) < MAX_LINKS:
            batch.cues.add(span_id)
        return trace_context(run_id, span_id)

    @staticmethod
    def _attempt(msg: Envelope, engine: EngineBase) -> int | None:
        attempt = getattr(msg.payload, "attempt", None)
        if isinstance(attempt, int) and attempt > 0:
            return attempt
        run = engine.runs.get(msg.run_id or "")
        cr = run.cues.get(msg.cue_id or "") if run is not None else None
        return cr.attempt if cr is not None and cr.attempt > 0 else None

    def _sent(self, error: str | None = None) -> None:
        end = time.time_ns()
        for run_id, start, batch in self._sending:
            trace_id = run_trace_id(run_id)
            attrs: dict[str, Any] = {
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
                "messaging.batch.message_count": batch.count,
                RUN_ID: run_id,
            }
            if len(batch.streams) == 1:
                attrs["messaging.destination.name"] = next(iter(batch.streams))
            links = batch.links
            links += ((trace_id, s, False, True, None) for s in batch.cues)
            self.spans.emit(
                "send", trace_id, new_span_id(), run_span_id(run_id),
                SpanKind.PRODUCER, start, end, attrs, links=links[:MAX_LINKS], error=error,
            )  # fmt: skip
        self._sending.clear()

    def failed(self, error: BaseException) -> None:
        """The write failed: what the send spans would have sent was not sent."""
        self._sent(f"state write failed: {error}")
        self._derived.clear()

    # -- receiving ------------------------------------------------------------------------
    def received(self, messages: Sequence[Envelope], engine: Engine) -> None:
        """Messages about to be handed to the engine: the context each came with (the
        sender's span, e.g. a specialist's `invoke_agent`) becomes a link of its cue's open
        span (the consumer side as links, not a span per message: see `stamp`). What the
        message did shows as the cue's phase events. Only a sender that may answer for the
        cue (the engine's own rule, `guard.is_target`) is linked: another agent naming the
        cue is refused by the engine and leaves no trace in the cue's span."""
        cues = self._cues
        for msg in messages:
            traceparent = msg.traceparent
            if traceparent is None or (open_ := cues.get(msg.run_id or "")) is None:
                continue
            cue_id = msg.cue_id or ""
            held = open_.get(cue_id)
            if held is None:  # outside a cue, or its span is not open on this hub
                continue
            if traceparent == held.linked or (
                getattr(msg.payload, "attempt", held.attempt) != held.attempt
            ):  # the sender's span linked last (its started, then its completion), or a
                continue  # late reply to an earlier attempt
            run = engine.runs.get(msg.run_id or "")
            if run is None or cue_id not in run.cues:
                continue
            if not guard.is_target(engine, run, cue_id, msg.from_agent):
                continue  # not the cue's to answer: the engine refuses it
            trace_id, span_id, sampled = parse_traceparent(traceparent)
            if held.links is None:
                held.links = []
            elif len(held.links) >= MAX_LINKS or any(link[1] == span_id for link in held.links):
                continue  # one link per sender's span
            held.links.append((trace_id, span_id, True, sampled, _PROCESS_LINK))
            held.linked = traceparent

    # -- what the step did ----------------------------------------------------------------
    def committed(self, out: Outbox, engine: EngineBase) -> None:
        """After the write: the send spans, the cue spans' phases, the finished runs."""
        if self._sending:
            self._sent()
        runs = engine.runs
        last: str | None = None  # a step's events come run by run: each run looked up once
        run: RunState | None = None
        for run_id, event in out.events:
            kind = event["type"]
            if kind not in _TRACED:
                continue
            if kind == "cue" and str(event["state"]) not in _CALLED:
                continue  # a cue pending, waiting, armed, or at GO (its own "go" event)
            if run_id != last:
                last, run = run_id, runs.get(run_id)
                if run is not None and (run.dry or not self.recorded(run_id)):
                    run = None
            if run is not None:
                self._event(run, kind, event)
        for run_id in out.finished:
            run = runs.get(run_id)
            if run is not None and not run.dry and self.recorded(run_id):
                self._end_run(run)
        self._derived.clear()

    def _event(self, run: RunState, kind: str, event: dict[str, Any]) -> None:
        cue_id = event.get("cue")
        if cue_id is None or (cr := run.cues.get(cue_id)) is None:
            return
        at = event.get("at")
        at = int(float(at) * 1e9) if at else 0
        attempt = int(event.get("attempt") or cr.attempt)
        if kind == "cue":
            state = str(event["state"])  # the engine's events hold the member
            if state in _WARNED:
                span = self._cue(run, cue_id, attempt, at, state)
                span.events.append((state, None, at))
            elif attempt > 0:  # ended; called: its span is open here or was
                span = self._cue(run, cue_id, attempt, at, state)
                if state == _COMPLETED:
                    span.events.append((state, None, at))
                else:
                    reason = event.get("reason") or state
                    span.events.append((state, {"reason": reason}, at))
                    span.error = reason
                    span.state = state
                self._end_cue(run.run_id, cue_id, at)
        elif kind == "go":
            span = self._cue(run, cue_id, attempt, at, "go")
            span.events.append(("go", _fired_by(event.get("fired_by")), at))
        elif kind == "attempt_failed" and self._open(run.run_id, cue_id) is not None:
            span = self._cue(run, cue_id, attempt, at)
            span.error = str(event.get("error") or "failed")
            span.events.append(("failed", {"error": span.error}, at))
        elif kind == "handoff" and self._open(run.run_id, cue_id) is not None:
            span = self._cue(run, cue_id, attempt, at)
            span.events.append(("handoff", {"callboard.handoff.to": event.get("to")}, at))

    def _cue(self, run: RunState, cue_id: str, attempt: int, at: int, phase: str = "") -> _Cue:
        """The span of this attempt: open already, or opened now at `phase` (its first, or
        a later one when this hub did not see it start: after a restart or a change of
        leader); an older attempt's span ends here."""
        run_id = run.run_id
        cues = self._cues.get(run_id)
        held = None if cues is None else cues.get(cue_id)
        if held is not None:
            if held.attempt == attempt:
                return held
            held.state = "retried"
            self._end_cue(run_id, cue_id, at)
            cues = self._cues.get(run_id)
        cr = run.cues[cue_id]
        started: list[EventRecord] = []
        start = at
        if cr.attempt == attempt:  # the phases this attempt passed before `phase`
            for name, field_name in _BEFORE.get(phase, _PHASES):
                if (t := getattr(cr, field_name)) is not None:
                    started.append((name, _RESUMED, _ns(t)))
                    start = min(start, _ns(t))
        span_id = self._derived.get((run_id, cue_id, attempt)) or cue_span_id(
            run_id, cue_id, attempt
        )
        span = _Cue(attempt, span_id, start, started)
        if cues is None:
            cues = self._cues[run_id] = {}
        cues[cue_id] = span
        return span

    def _open(self, run_id: str, cue_id: str) -> _Cue | None:
        """The open span of the cue's attempt, if any."""
        cues = self._cues.get(run_id)
        return None if cues is None else cues.get(cue_id)

    def _end_cue(self, run_id: str, cue_id: str, at: int) -> None:
        cues = self._cues[run_id]
        span = cues.pop(cue_id)
        if not cues:
            del self._cues[run_id]
        name, links = f"cue {cue_id}", span.links or ()
        attrs: dict[str, Any] = {CUE_ID: cue_id, ATTEMPT: span.attempt}
        if span.state is not None:
            attrs["callboard.cue.state"] = span.state
        if not self._encoded:  # the SDK's spans, for another exporter
            self.spans.emit(
                name, run_trace_id(run_id), span.span_id, run_span_id(run_id),
                SpanKind.INTERNAL, span.start_ns, at, {RUN_ID: run_id, **attrs},
                span.events, links, span.error,
            )  # fmt: skip
            return
        siblings = self._families.get(run_id) or self._siblings(run_id)
        try:  # its bytes now, from what the run's cue spans share (written once)
            written = siblings.span(
                name, span.span_id, span.start_ns, at, attrs, span.events, links, span.error
            )
        except (TypeError, ValueError) as exc:  # a cue id that is not UTF-8: this span
            log.warning("span %r left out: %s", name, exc)
            return
        self.spans.emit_encoded(written)

    def _siblings(self, run_id: str) -> Siblings:
        """What the run's cue spans share, written once (kept while the run is traced)."""
        found = self._families.get(run_id)
        if found is None:
            if len(self._families) >= MAX_FAMILIES:
                self._families.clear()
            found = self._families[run_id] = Siblings(
                run_trace_id(run_id), run_span_id(run_id), SpanKind.INTERNAL, {RUN_ID: run_id}
            )
        return found

    def _end_run(self, run: RunState) -> None:
        start = run.started_at or run.created_at
        end = _ns(max(run.completed_at or start, start))
        for cue_id, span in list(self._cues.get(run.run_id, {}).items()):  # its cues' only
            span.state = run.cues[cue_id].state.value
            self._end_cue(run.run_id, cue_id, end)
        self._families.pop(run.run_id, None)
        attrs: dict[str, Any] = {
            RUN_ID: run.run_id, "callboard.cuelist": run.cuelist,
            "callboard.cuelist.version": run.version, "callboard.run.status": run.status.value,
            "callboard.run.cues": len(run.cues),
        }  # fmt: skip
        links: list[LinkRecord] = []
        if run.rerun_of:  # the run this one reruns: another trace, linked
            attrs["callboard.run.rerun_of"] = run.rerun_of
            source = run_trace_id(run.rerun_of), run_span_id(run.rerun_of)
            links.append((*source, False, True, _RERUN_OF))
        events: list[EventRecord] = [(run.status.value, dict(run.counts()), end)]
        error = None if run.status is RunStatus.SUCCESS else run.status.value
        self.spans.emit(
            f"run {run.cuelist}", run_trace_id(run.run_id), run_span_id(run.run_id), None,
            SpanKind.INTERNAL, _ns(start), end, attrs, events, links, error,
        )  # fmt: skip


def _fired_by(value: Any) -> Frozen:
    """The GO event's attributes: one per value, shared, written once."""
    found = _FIRED_BY.get(value)
    if found is None:
        if len(_FIRED_BY) >= MAX_FIRED_BY:
            _FIRED_BY.clear()
        found = _FIRED_BY[value] = Frozen(
            {"callboard.go.fired_by": None if value is None else str(value)}
        )
    return found


def _links(msg: Envelope) -> list[LinkRecord]:
    """A link to the context the message came with (a specialist's span), if any: a link,
    not a parent, since a specialist is not trusted to place the hub's spans."""
    if msg.traceparent is None:  # absent, or malformed and dropped by the codec
        return []
    trace_id, span_id, sampled = parse_traceparent(msg.traceparent)
    return [(trace_id, span_id, True, sampled, None)]
