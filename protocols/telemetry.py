"""Spans for one process (hub or specialist), when tracing is on: each handed over as a
record when it ends, written out a few dozen at a time, and exported in batches by a
thread of its own.

callboard knows each span's ids, times, events and links by the time it ends, so it makes
no live span: a tuple of plain values when the span ends (no sampler, no attribute checks:
a quarter of the SDK's cost per span). BUILD_CHUNK records at once are then written, on
the thread that emitted them, as what the exporter takes: for OTLP (and `none`), each
span's OTLP/protobuf bytes (protocols.otlp: the message the SDK's encoder would build, at
a seventh to a tenth of its cost, bench/codec.py; no `ReadableSpan` is made); for any
other exporter (console, a test's), the SDK's `ReadableSpan`s. A span whose bytes its
maker writes at once (a specialist's `invoke_agent`, from an `otlp.Shape`; the hub's cue
spans, from their run's `otlp.Siblings`) goes straight to the export queue
(`emit_encoded`). Not on the export thread: a second thread busy with Python holds the GIL
the event loop wants after each of its socket calls, and that costs the process more than
the writing does (bench/tracing.py, 5 alternating rounds: building on the export thread,
on/off 0.69x-0.85x the rate, hub 194-230 us and echo 122-164 us CPU per cue; building
here, 0.76x-1.15x, 166-224 us and 106-168 us). The export thread only joins a batch's
spans into one request and posts it with the SDK's OTLP/HTTP client (its endpoint,
headers, compression, timeout and retries), or hands a batch of SDK spans to another
exporter. Batching is the SDK batch processor's, with its settings: batches of at most
OTEL_BSP_MAX_EXPORT_BATCH_SIZE, exported every OTEL_BSP_SCHEDULE_DELAY or as soon as one
is full; past OTEL_BSP_MAX_QUEUE_SIZE waiting, a span is dropped. The exporter: OTLP over
HTTP (protobuf) to the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT (default
http://localhost:4318), the console with OTEL_TRACES_EXPORTER=console, or nowhere with
`none` (CALLBOARD_TRACING=1 still makes the spans and propagates their context).
Off, nothing here runs.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from protocols import otlp
from protocols.settings import Settings

__all__ = ["EventRecord", "LinkRecord", "Sampler", "SpanContext", "SpanKind", "Spans"]

# Span attribute and name words both sides use (OpenTelemetry semantic conventions:
# messaging, GenAI agents; callboard's own under `callboard.`).
MESSAGING_SYSTEM = "redis"
RUN_ID = "callboard.run.id"
CUE_ID = "callboard.cue.id"
ATTEMPT = "callboard.cue.attempt"
AGENT = "callboard.agent"
# A span event: (name, attributes or None, time in ns since the epoch).
EventRecord = tuple[str, Mapping[str, Any] | None, int]
# A link: (trace id, span id, is remote, sampled, attributes or None).
LinkRecord = tuple[int, int, bool, bool, Mapping[str, Any] | None]
# An ended span: `Spans.emit`'s arguments, in order.
_Record = tuple[
    str, int, int, int | None, SpanKind, int, int, Mapping[str, Any],
    Sequence[EventRecord], Sequence[LinkRecord], str | None,
]  # fmt: skip
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSAMPLED = TraceFlags(TraceFlags.DEFAULT)
_OK = Status(StatusCode.UNSET)
BUILD_CHUNK = 64  # records made into SDK spans at once (at most a batch)
_random = random.Random()
log = logging.getLogger(__name__)


def new_span_id() -> int:
    return _random.getrandbits(64) or 1


def new_trace_id() -> int:
    return _random.getrandbits(128) or 1


class Sampler:
    """Which traces are recorded: head sampling under OpenTelemetry's standard
    OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.

    `always_on`, `always_off` and `traceidratio` (ARG: the share kept, 0 to 1; 1 when
    unset) decide by the trace id alone, by the SDK's own rule (`TraceIdRatioBased`: the
    id's low 64 bits under the ratio's bound), so every process decides the same for a
    trace; their `parentbased_` forms (the default: `parentbased_always_on`) follow the
    sampled flag of the context a message came with, when it came with one. A run's trace
    id derives from its run id, so every hub, after any restart, keeps or leaves out the
    same runs. A trace left out still propagates, flagged unsampled, and nobody records it.
    A name or argument the SDK would not take is refused (ValueError) rather than traced
    otherwise than asked."""

    NAMES = ("always_on", "always_off", "traceidratio")

    def __init__(self, name: str | None = None, arg: str | None = None) -> None:
        kind = (name or "parentbased_always_on").strip().lower()
        self.name = kind
        self.parent_based = kind.startswith("parentbased_")
        root = kind.removeprefix("parentbased_")
        if root not in self.NAMES:
            raise ValueError(
                f"OTEL_TRACES_SAMPLER={name!r}: callboard samples with "
                + ", ".join(f"{n}, parentbased_{n}" for n in self.NAMES)
            )
        rate = 1.0 if root == "always_on" else 0.0
        if root == "traceidratio":
            rate = _ratio(arg)
        self.rate = rate
        self.bound = TraceIdRatioBased.get_bound_for_rate(rate)
        self.everything = self.bound > TraceIdRatioBased.TRACE_ID_LIMIT  # no id is left out

    @classmethod
    def from_settings(cls, settings: Settings) -> Sampler:
        return cls(settings.otel_traces_sampler, settings.otel_traces_sampler_arg)

    def root(self, trace_id: int) -> bool:
        """Is trace `trace_id` recorded, when nothing upstream decided (a run, a message
        that came with no context)?"""
        return trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < self.bound

    def decide(self, trace_id: int, parent_sampled: bool | None) -> bool:
        """Is a span of trace `trace_id` recorded, under a parent flagged `parent_sampled`
        (None: no parent)?"""
        if self.parent_based and parent_sampled is not None:
            return parent_sampled
        return self.root(trace_id)


def _ratio(arg: str | None) -> float:
    if arg is None or not arg.strip():
        return 1.0
    try:
        rate = float(arg)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:  # NaN fails this too
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={arg!r}: a ratio from 0 to 1")
    return rate


class Spans:
    """Where this process's spans go: `emit` an ended span, `flush`, `shutdown`."""

    def __init__(self, settings: Settings, service: str, exporter: SpanExporter | None = None):
        self.sampler = Sampler.from_settings(settings)  # first: a bad setting starts nothing
        name = settings.otel_service_name or service
        self.resource = Resource.create({"service.name": name})
        self.scope = InstrumentationScope("callboard")
        self.exporter = exporter or _configured_exporter(settings)
        self.delay_s = settings.otel_bsp_schedule_delay_ms / 1000
        self.max_queue = settings.otel_bsp_max_queue_size
        self.batch_size = min(settings.otel_bsp_max_export_batch_size, self.max_queue)
        self.dropped = 0  # spans the full queue turned away
        self.build_chunk = min(BUILD_CHUNK, self.batch_size)
        # OTLP (and `none`): each span written as its OTLP bytes (protocols.otlp), a batch
        # sent as one request; any other exporter is given the SDK's spans
        self._send = _bytes_sender(self.exporter)
        self.request = otlp.Request(self.resource, self.scope)
        self._records: deque[_Record] = deque()  # ended, not yet made into spans
        self._queue: deque[ReadableSpan | bytes] = deque()  # made, waiting for their batch
        self._wake = threading.Event()
        self._exporting = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="callboard-spans", daemon=True)
        self._thread.start()

    def emit(
        self, name: str, trace_id: int, span_id: int, parent_id: int | None, kind: SpanKind,
        start_ns: int, end_ns: int, attributes: Mapping[str, Any],
        events: Sequence[EventRecord] = (), links: Sequence[LinkRecord] = (),
        error: str | None = None,
    ) -> None:  # fmt: skip
        """Export one ended span (after the batch delay, or once a batch is full)."""
        if self._full():
            return
        records = self._records
        records.append((
            name, trace_id, span_id, parent_id, kind, start_ns, end_ns, attributes, events,
            links, error,
        ))  # fmt: skip
        if len(records) >= self.build_chunk:
            self._build()
            if len(self._queue) >= self.batch_size:
                self._wake.set()

    def emit_encoded(self, span: bytes) -> None:
        """Export one ended span already written as its OTLP bytes (`otlp.Shape`): only
        when `encoded`."""
        if self._full():
            return
        queue = self._queue
        queue.append(span)
        if len(queue) >= self.batch_size:
            self._wake.set()

    def _full(self) -> bool:
        """Is the export queue full (records not yet written count)? A span turned away
        is counted in `dropped`."""
        if len(self._records) + len(self._queue) < self.max_queue:
            return False
        self.dropped += 1
        return True

    def flush(self) -> None:
        """Export every span emitted so far, now, in this thread."""
        self._export(everything=True)

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        self._thread.join(30)
        self._export(everything=True)
        self.exporter.shutdown()

    def _run(self) -> None:
        while not self._stopped:
            full = self._wake.wait(self.delay_s)
            self._wake.clear()
            self._export(everything=not full)

    @property
    def encoded(self) -> bool:
        """Are spans written as OTLP bytes here (not handed to the exporter as SDK spans)?"""
        return self._send is not None

    def _build(self) -> None:
        """The records emitted so far, made into spans (OTLP bytes, or the SDK's) in the
        export queue."""
        records, queue = self._records, self._queue
        encoded = self._send is not None
        while records:
            try:
                record = records.popleft()
            except IndexError:  # the other thread took the last one
                return
            if not encoded:
                queue.append(self._span(record))
                continue
            try:
                queue.append(otlp.span(*record))
            except (TypeError, ValueError) as exc:  # a name that is not UTF-8: this span
                log.warning("span %r left out: %s", record[0], exc)

    def _export(self, everything: bool) -> None:
        """Full batches, then (on the delay, a flush) what is left, the records not yet
        made into spans included."""
        if everything:
            self._build()
        with self._exporting:
            queue = self._queue
            while len(queue) >= self.batch_size or (everything and queue):
                batch = [queue.popleft() for _ in range(min(self.batch_size, len(queue)))]
                try:
                    if self._send is not None:
                        self._send(self.request(cast("list[bytes]", batch)))
                    else:
                        self.exporter.export(cast("list[ReadableSpan]", batch))
                except Exception:  # an exporter's failure costs its batch, not the thread
                    log.exception("exporting %d spans failed", len(batch))

    def _span(self, record: _Record) -> ReadableSpan:
        name, trace_id, span_id, parent_id, kind, start, end, attrs, events, links, error = record
        parent = None if parent_id is None else SpanContext(trace_id, parent_id, True, SAMPLED)
        return ReadableSpan(
            name, SpanContext(trace_id, span_id, False, SAMPLED), parent, self.resource, attrs,
            [Event(event, attributes, at) for event, attributes, at in events],
            [
                Link(SpanContext(t, s, remote, SAMPLED if sampled else UNSAMPLED), attributes)
                for t, s, remote, sampled, attributes in links
            ],
            kind, status=_OK if error is None else Status(StatusCode.ERROR, error[:500]),
            start_time=start, end_time=max(end, start), instrumentation_scope=self.scope,
        )  # fmt: skip


class Dropped(SpanExporter):
    """OTEL_TRACES_EXPORTER=none with CALLBOARD_TRACING=1: spans are made (written as
    OTLP would send them) and the context propagates (to messages, to the http and a2a
    kinds' calls), but nothing is exported."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def send(self, request: bytes) -> None:
        """An encoded request, thrown away."""


def _bytes_sender(exporter: SpanExporter) -> Callable[[bytes], None] | None:
    """How to send an encoded request through `exporter`, when it takes one: `none`, and
    the SDK's OTLP/HTTP exporter (its HTTP client: endpoint, headers, compression,
    timeout and retries as OTEL_EXPORTER_OTLP_* configure them; not its encoder). None
    for any other exporter (console, a test's), which is given the SDK's spans."""
    if isinstance(exporter, Dropped):
        return exporter.send
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    client = getattr(exporter, "_client", None)  # the SDK's own HTTP client (1.45)
    post = getattr(client, "export", None)
    if type(exporter) is not OTLPSpanExporter or not callable(post):
        return None
    limit = getattr(exporter, "_max_request_size", 0) or 0

    def send(request: bytes) -> None:
        if exporter._shutdown:
            return
        if 0 < limit < len(request):  # as the SDK's exporter drops it
            log.warning("dropping a span batch of %d bytes over the %d limit", len(request), limit)
            return
        result = post(request)
        if not result.success:
            log.warning("exporting spans failed: %s", result.error)

    return send


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
