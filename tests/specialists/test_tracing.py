"""The specialist side of traces: the W3C header on outgoing calls (http, a2a kinds), and
nothing at all when tracing is off."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from opentelemetry import propagate, trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from protocols import payloads as p
from protocols.codec import make
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.tracecontext import format_traceparent
from specialists.builtin.a2a import A2A
from specialists.tracing import SpecialistTracer, current_traceparent, request_hooks
from tests.webserver import collecting_traces

GO_CONTEXT = format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)


def _tracer() -> tuple[SpecialistTracer, InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    tracer = SpecialistTracer.from_settings(Settings(), "agent-a", "r1", spans)
    return tracer, spans


def _go() -> Any:
    payload = p.CoordGo(cue_id="C", target_agents=["agent-a"], attempt=2)
    return make(T.COORD_GO, payload, run_id="run-1", cue_id="C", traceparent=GO_CONTEXT)


async def test_an_outgoing_call_carries_the_invoke_agent_span_as_traceparent() -> None:
    tracer, spans = _tracer()
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={})

    transport = httpx.MockTransport(answer)
    async with httpx.AsyncClient(transport=transport, event_hooks=request_hooks(tracer)) as http:
        await http.get("http://agent.test/outside")  # no span open: no header
        with tracer.invoke(_go(), "C", 2, "http"):
            inside = current_traceparent()
            await http.get("http://agent.test/inside")
    tracer.shutdown()  # exports what the batch processor holds
    (invoke,) = spans.get_finished_spans()
    assert "traceparent" not in seen[0]
    assert seen[1]["traceparent"] == inside
    assert inside == format_traceparent(invoke.context.trace_id, invoke.context.span_id)
    # the span continues the GO's context
    assert invoke.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert invoke.parent is not None and invoke.parent.span_id == 0xB7AD6B7169203331
    assert invoke.name == "invoke_agent agent-a"
    assert invoke.attributes is not None
    assert invoke.attributes["gen_ai.agent.name"] == "agent-a"
    assert invoke.attributes["callboard.cue.attempt"] == 2


async def test_the_a2a_kind_hooks_its_client_only_when_tracing() -> None:
    traced = A2A("agent-a", settings=Settings())
    traced.tracer, _ = _tracer()
    dark = A2A("agent-b", settings=Settings())
    assert dark.tracer is None
    on = traced.remote({"url": "http://remote.test"})
    off = dark.remote({"url": "http://remote.test"})
    assert on.http.event_hooks["request"] == request_hooks(traced.tracer)["request"]
    assert off.http.event_hooks["request"] == []
    await on.http.aclose()
    await off.http.aclose()
    traced.tracer.shutdown()


def test_tracing_is_off_unless_configured(monkeypatch: Any) -> None:
    for name in ("CALLBOARD_TRACING", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    assert Settings().tracing_on is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert Settings().tracing_on is True
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert Settings().tracing_on is False
    monkeypatch.setenv("CALLBOARD_TRACING", "1")
    assert Settings().tracing_on is True
    monkeypatch.setenv("CALLBOARD_TRACING", "0")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    assert Settings().tracing_on is False
    monkeypatch.setenv("CALLBOARD_TRACING", "1")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert Settings().tracing_on is False


async def test_work_the_sampler_leaves_out_propagates_unsampled_and_records_nothing() -> None:
    unsampled = format_traceparent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, False)
    payload = p.CoordGo(cue_id="C", target_agents=["agent-a"], attempt=1)
    left_out = make(T.COORD_GO, payload, run_id="run-1", cue_id="C", traceparent=unsampled)
    no_context = make(T.COORD_GO, payload, run_id="run-2", cue_id="C")
    seen: list[str | None] = []
    # the default (parent-based) follows the hub's flag; always_off starts no trace
    for name, message in (("parentbased_always_on", left_out), ("always_off", no_context)):
        spans = InMemorySpanExporter()
        settings = Settings(otel_traces_sampler=name)
        tracer = SpecialistTracer.from_settings(settings, "agent-a", "r1", spans)
        with tracer.invoke(message, "C", 1, "echo"):
            seen.append(current_traceparent())
        tracer.shutdown()
        assert spans.get_finished_spans() == ()
    # the context still travels (to the replies, the http and a2a calls), flagged unsampled
    assert seen[0] is not None and seen[0].startswith(unsampled[:36]) and seen[0][-3:] == "-00"
    assert seen[1] is not None and seen[1][-3:] == "-00"
    # a sampled GO under the default is recorded, as before
    spans = InMemorySpanExporter()
    tracer = SpecialistTracer.from_settings(Settings(), "agent-a", "r1", spans)
    with tracer.invoke(_go(), "C", 2, "echo"):
        pass
    tracer.shutdown()
    assert len(spans.get_finished_spans()) == 1


def test_spans_exported_as_otlp_are_written_at_once_and_are_the_spans_recorded(
    monkeypatch: Any,
) -> None:
    """With an OTLP exporter a span is written as its bytes when its work ends (not kept
    as a record): what the collector gets is the span the record would have been."""
    with collecting_traces(monkeypatch) as bodies:
        tracer = SpecialistTracer.from_settings(Settings(), "agent-a", "r1")
        assert tracer.shape is not None
        with tracer.invoke(_go(), "C", 2, "echo"):
            inside = current_traceparent()
        with tracer.invoke(_go(), "C", 3, "echo"):
            tracer.failed("boom")  # an error: written from its record, the same way
        assert len(tracer.spans._queue) == 1 and len(tracer.spans._records) == 1
        tracer.shutdown()
    (body,) = bodies
    sent = ExportTraceServiceRequest.FromString(body).resource_spans[0].scope_spans[0].spans
    by_attempt = {
        {a.key: a.value for a in s.attributes}["callboard.cue.attempt"].int_value: s for s in sent
    }
    ok, failed = by_attempt[2], by_attempt[3]
    assert inside is not None
    assert (ok.trace_id.hex(), ok.span_id.hex()) == (inside[3:35], inside[36:52])
    assert ok.parent_span_id == (0xB7AD6B7169203331).to_bytes(8, "big")
    assert ok.name == failed.name == "invoke_agent agent-a"
    assert ok.status.code == 0 and failed.status.message == "boom"
    for span in (ok, failed):
        attrs = {a.key: a.value for a in span.attributes}
        assert list(attrs) == [
            "gen_ai.operation.name", "gen_ai.agent.name", "callboard.cue.id",
            "callboard.cue.attempt", "callboard.run.id",
        ]  # fmt: skip
        assert attrs["gen_ai.agent.name"].string_value == "agent-a"
        assert attrs["callboard.run.id"].string_value == "run-1"


@pytest.mark.parametrize("installed", [True, False], ids=["runtime", "alone"])
async def test_a_span_the_authors_code_starts_is_a_child_of_the_work(installed: bool) -> None:
    """The work's span is the OpenTelemetry API's current span while `execute` runs: in
    tasks started after the context was installed (the runtime's: no context attached per
    execution), or in code that invokes alone. Outside any work nothing is current."""
    tracer, spans = _tracer()
    theirs = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(theirs))
    token = tracer.install() if installed else None

    async def work() -> tuple[str | None, dict[str, str], dict[str, str]]:
        with (invocation := tracer.invoke(_go(), "C", 2, "echo")):
            assert (invocation._attached is None) is installed
            with provider.get_tracer("author").start_as_current_span("their step"):
                nested = current_traceparent()
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        outside: dict[str, str] = {}
        propagate.inject(outside)
        assert not trace.get_current_span().get_span_context().is_valid
        assert current_traceparent() is None
        return nested, carrier, outside

    try:
        nested, carrier, outside = await asyncio.create_task(work())
    finally:
        if token is not None:
            tracer.uninstall(token)
    tracer.shutdown()
    (invoke,) = spans.get_finished_spans()
    (step,) = theirs.get_finished_spans()
    assert step.parent is not None and step.parent.span_id == invoke.context.span_id
    assert step.context.trace_id == invoke.context.trace_id
    assert nested == format_traceparent(invoke.context.trace_id, invoke.context.span_id)
    assert carrier["traceparent"] == nested
    assert outside == {}
