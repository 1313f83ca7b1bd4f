"""A process's spans: records made into the SDK's spans by the export thread, batched as the
SDK's batch processor batches them (OTEL_BSP_*), dropped past a full queue."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode

from protocols.settings import Settings
from protocols.telemetry import BUILD_CHUNK, Sampler, Spans
from protocols.tracecontext import run_trace_id

WAIT_S = 10  # a deadline, never a sleep


class Held(SpanExporter):
    """Keeps each batch; holds the export thread inside `export` while `hold` is clear."""

    def __init__(self) -> None:
        self.batches: list[list[ReadableSpan]] = []
        self.entered = threading.Event()
        self.hold = threading.Event()
        self.hold.set()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        assert self.hold.wait(WAIT_S)
        self.batches.append(list(spans))
        return SpanExportResult.SUCCESS


def _spans(exporter: SpanExporter, **bsp: int) -> Spans:
    settings = Settings(otel_bsp_schedule_delay_ms=60_000, **bsp)  # the delay never passes
    return Spans(settings, "svc", exporter)


def _emit(spans: Spans, name: str, span_id: int = 7) -> None:
    spans.emit(name, 1, span_id, None, SpanKind.INTERNAL, 10, 20, {"k": name})


def test_a_record_becomes_the_sdk_span_it_describes() -> None:
    exporter = Held()
    spans = _spans(exporter)
    spans.emit(
        "cue A", 0xABC, 0x12, 0x34, SpanKind.PRODUCER, 100, 90, {"callboard.cue.id": "A"},
        events=[("go", {"callboard.go.fired_by": "run-start"}, 95), ("completed", None, 99)],
        links=[(0xDEF, 0x56, True, False, {"x": 1}), (0xABC, 0x78, False, True, None)],
        error="failed: boom",
    )  # fmt: skip
    spans.flush()
    ((span,),) = exporter.batches
    assert span.name == "cue A" and span.kind is SpanKind.PRODUCER
    assert (span.context.trace_id, span.context.span_id) == (0xABC, 0x12)
    assert span.context.trace_flags.sampled and not span.context.is_remote
    assert span.parent is not None and span.parent.span_id == 0x34
    assert span.start_time == 100 and span.end_time == 100  # never before its start
    assert [(e.name, e.attributes, e.timestamp) for e in span.events] == [
        ("go", {"callboard.go.fired_by": "run-start"}, 95), ("completed", None, 99),
    ]  # fmt: skip
    first, second = span.links
    assert (first.context.trace_id, first.context.span_id) == (0xDEF, 0x56)
    assert first.context.is_remote and not first.context.trace_flags.sampled
    assert first.attributes == {"x": 1}
    assert second.context.trace_flags.sampled and not second.context.is_remote
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "failed: boom"
    assert span.resource.attributes["service.name"] == "svc"
    spans.shutdown()


def test_spans_are_made_a_chunk_at_a_time_on_the_emitting_thread() -> None:
    """The export thread only exports: the SDK spans are made where they are emitted, a
    chunk at a time (the rest when their batch goes, at the delay or a flush)."""
    exporter = Held()
    spans = _spans(exporter)
    for i in range(BUILD_CHUNK + 1):
        _emit(spans, f"s{i}", span_id=i + 1)
    assert len(spans._queue) == BUILD_CHUNK and len(spans._records) == 1
    assert all(isinstance(span, ReadableSpan) for span in spans._queue)
    assert exporter.batches == []  # a batch is not full yet: nothing exported
    spans.flush()
    names = [s.name for batch in exporter.batches for s in batch]
    assert names == [f"s{i}" for i in range(BUILD_CHUNK + 1)]
    spans.shutdown()


def test_a_full_batch_goes_without_waiting_for_the_delay() -> None:
    exporter = Held()
    spans = _spans(exporter, otel_bsp_max_export_batch_size=2)
    _emit(spans, "a")
    _emit(spans, "b")
    assert exporter.entered.wait(WAIT_S)  # the export thread took it: no flush asked
    spans.shutdown()
    assert [[s.name for s in batch] for batch in exporter.batches] == [["a", "b"]]


def test_past_a_full_queue_spans_are_dropped_and_the_rest_exported() -> None:
    exporter = Held()
    exporter.hold.clear()
    spans = _spans(exporter, otel_bsp_max_export_batch_size=2, otel_bsp_max_queue_size=2)
    _emit(spans, "a")
    _emit(spans, "b")
    assert exporter.entered.wait(WAIT_S)  # the thread holds [a, b] in the exporter
    _emit(spans, "c")
    _emit(spans, "d")
    _emit(spans, "e")  # the queue holds c and d: no room
    assert spans.dropped == 1
    exporter.hold.set()
    spans.shutdown()
    assert [s.name for batch in exporter.batches for s in batch] == ["a", "b", "c", "d"]


def test_an_exporter_that_fails_costs_its_batch_not_the_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(Held):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            if not self.batches:
                self.batches.append([])
                raise RuntimeError("collector down")
            return super().export(spans)

    exporter = Failing()
    spans = _spans(exporter)
    _emit(spans, "lost")
    spans.flush()
    _emit(spans, "kept")
    spans.shutdown()
    assert [[s.name for s in batch] for batch in exporter.batches] == [[], ["kept"]]
    assert "exporting 1 spans failed" in caplog.text


def test_the_batch_settings_are_the_sdk_processors_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "200")
    settings = Settings()
    assert settings.otel_bsp_schedule_delay_ms == 20
    spans = Spans(settings, "svc", Held())
    assert spans.delay_s == 0.02 and spans.max_queue == 100
    assert spans.batch_size == 100  # a batch is never more than the queue holds
    spans.shutdown()


# -- head sampling ------------------------------------------------------------------------
TRACE_IDS = st.integers(min_value=1, max_value=2**128 - 1)


@settings(max_examples=300, deadline=None)
@given(trace_id=TRACE_IDS, rate=st.floats(min_value=0.0, max_value=1.0))
def test_a_ratio_keeps_the_traces_the_sdks_ratio_sampler_keeps(trace_id: int, rate: float) -> None:
    sdk = TraceIdRatioBased(rate).should_sample(None, trace_id, "span").decision.is_sampled()
    assert Sampler("traceidratio", repr(rate)).root(trace_id) is sdk
    # parent-based, a run (no parent) is decided the same way
    assert Sampler("parentbased_traceidratio", repr(rate)).decide(trace_id, None) is sdk


@given(trace_id=TRACE_IDS, parent=st.booleans())
def test_parent_based_samplers_follow_the_parent_and_the_others_do_not(
    trace_id: int, parent: bool
) -> None:
    for name in ("parentbased_always_on", "parentbased_always_off", None):
        assert Sampler(name).decide(trace_id, parent) is parent
    assert Sampler("always_on").decide(trace_id, parent) is True
    assert Sampler("always_off").decide(trace_id, parent) is False
    assert Sampler(None).decide(trace_id, None) is True  # the default: every run
    assert Sampler("parentbased_always_off").decide(trace_id, None) is False


def test_a_ratio_keeps_about_its_share_of_runs() -> None:
    sampler = Sampler("traceidratio", "0.25")
    kept = sum(sampler.root(run_trace_id(f"run-{i}")) for i in range(4000))
    assert 850 < kept < 1150  # 1,000 expected; the ids are SHA-256 digests
    assert Sampler("traceidratio").rate == 1.0 and Sampler("traceidratio", " ").rate == 1.0
    assert Sampler("traceidratio", "0").root(2**64 - 1 + 2**100) is False
    assert Sampler("traceidratio", "1").everything and not sampler.everything


@pytest.mark.parametrize(
    ("name", "arg", "named"),
    [
        ("probabilistic", None, "OTEL_TRACES_SAMPLER='probabilistic'"),
        ("parentbased_jaeger_remote", None, "OTEL_TRACES_SAMPLER="),
        ("traceidratio", "1.5", "OTEL_TRACES_SAMPLER_ARG='1.5'"),
        ("traceidratio", "-0.1", "OTEL_TRACES_SAMPLER_ARG="),
        ("parentbased_traceidratio", "half", "OTEL_TRACES_SAMPLER_ARG='half'"),
        ("traceidratio", "nan", "OTEL_TRACES_SAMPLER_ARG='nan'"),
    ],
)
def test_a_sampler_setting_the_sdk_would_not_take_is_refused_at_start(
    name: str, arg: str | None, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        Sampler(name, arg)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
    if arg is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    started = threading.active_count()
    with pytest.raises(ValueError, match=re.escape(named)):
        Spans(Settings(), "svc", Held())
    assert threading.active_count() == started  # no export thread was left running
