"""The specialist side of traces: the W3C header on outgoing calls (http, a2a kinds), and
nothing at all when tracing is off."""

from __future__ import annotations

from typing import Any

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from protocols import payloads as p
from protocols.codec import make
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.tracecontext import format_traceparent
from specialists.builtin.a2a import A2A
from specialists.tracing import SpecialistTracer, current_traceparent, request_hooks

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
