"""One run is one trace across real processes: the hub and each specialist export OTLP/HTTP
to a collector this test runs (decoding the protobuf with opentelemetry-proto), and the
test checks the ids: one trace id, and each span's parent is the span that caused it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from callboard.embedded import EmbeddedServer
from protocols.tracecontext import run_span_id, run_trace_id
from tests.e2e.procs import child_env, processes, wait_done, wait_online
from tests.helpers import eventually_sync
from tests.webserver import Answer, Request, serving

pytestmark = [pytest.mark.redis, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
AGENTS = ("specialist-code", "specialist-test", "specialist-deploy")
PRODUCER = 4  # opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_PRODUCER


@dataclass
class Span:
    service: str
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    kind: int
    attributes: dict[str, Any]
    events: list[str]
    links: list[tuple[int, int]]


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver (POST /v1/traces), and an endpoint that keeps the headers
    of what it is sent (POST /hook: the `http` specialist's calls)."""

    url: str = ""
    spans: list[Span] = field(default_factory=list)
    hooks: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for rs in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append(
                        Span(
                            service=attrs.get("service.name", ""),
                            name=s.name,
                            trace_id=int.from_bytes(s.trace_id, "big"),
                            span_id=int.from_bytes(s.span_id, "big"),
                            parent_id=int.from_bytes(s.parent_span_id, "big") or None,
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            events=[e.name for e in s.events],
                            links=[
                                (
                                    int.from_bytes(k.trace_id, "big"),
                                    int.from_bytes(k.span_id, "big"),
                                )
                                for k in s.links
                            ],
                        )
                    )
        with self.lock:
            self.spans.extend(found)

    def named(self, prefix: str, trace_id: int | None = None) -> list[Span]:
        with self.lock:
            return [
                s for s in self.spans
                if s.name.startswith(prefix) and (trace_id is None or s.trace_id == trace_id)
            ]  # fmt: skip


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[Collector]:
    found = Collector()

    def receive(request: Request) -> Answer:
        if request.path == "/v1/traces":
            found.take(request.body)
            answer = ExportTraceServiceResponse().SerializeToString()
            return Answer(200, answer, "application/x-protobuf")
        with found.lock:
            found.hooks.append(request.headers)
        return Answer(200, json.dumps({"ok": True}).encode(), "application/json")

    with serving(receive) as url:
        found.url = url
        yield found


def _env(redis_server: EmbeddedServer, collector: Collector) -> dict[str, str]:
    return child_env(
        redis_server,
        CALLBOARD_TRACING="1",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{collector.url}/v1/traces",
        OTEL_BSP_SCHEDULE_DELAY="100",  # ms between batch exports (default 5 s)
        CALLBOARD_ECHO_EXECUTE_MS="0",
    )


def test_a_handoff_run_is_one_trace_across_the_hub_and_specialist_processes(
    redis_server: EmbeddedServer, collector: Collector, tmp_path: Path
) -> None:
    with processes(_env(redis_server, collector), tmp_path) as procs:
        url = procs.hub()
        for agent in AGENTS:
            procs.echo(agent)
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, list(AGENTS))
            source = (ROOT / "cuelists/handoff-chain.yaml").read_text()
            created = api.post("/v1/cuelists", content=source,
                               headers={"Content-Type": "application/yaml"})  # fmt: skip
            assert created.status_code == 201, created.text
            run_id = api.post("/v1/runs", json={"cuelist": "handoff-chain"}).json()["run_id"]
            assert wait_done(api, run_id)["status"] == "success"
        trace_id = run_trace_id(run_id)
        (run,) = eventually_sync(lambda: collector.named("run ", trace_id), 15, interval_s=0.05)
        invokes = eventually_sync(
            lambda: (found := collector.named("invoke_agent ", trace_id)) and len(found) == 3
            and found, 15, interval_s=0.05,
        )  # fmt: skip

    assert run.service == "callboard-hub" and run.parent_id is None
    assert run.span_id == run_span_id(run_id)
    cues = {s.attributes["callboard.cue.id"]: s for s in collector.named("cue ", trace_id)}
    assert sorted(cues) == ["CODE-100", "DEPLOY-300", "TEST-200"]
    sends = [s for s in collector.named("send", trace_id) if s.name == "send"]
    assert sends and all(s.kind == PRODUCER and s.parent_id == run.span_id for s in sends)
    assert all(s.attributes["messaging.system"] == "redis" for s in sends)
    linked = {span_id for s in sends for _, span_id in s.links}
    by_agent = {s.attributes["gen_ai.agent.name"]: s for s in invokes}
    for cue_id, agent in zip(("CODE-100", "TEST-200", "DEPLOY-300"), AGENTS, strict=True):
        cue, invoke = cues[cue_id], by_agent[agent]
        assert cue.parent_id == run.span_id
        assert cue.attributes["callboard.run.id"] == run_id
        assert cue.attributes["callboard.cue.attempt"] == 1
        assert cue.events[:3] == ["warning", "standby", "go"] and cue.events[-1] == "completed"
        assert cue.span_id in linked  # the hub's writes carried this cue's messages
        # the specialist, another process, continued the cue's context from the GO
        assert invoke.service == agent and invoke.trace_id == trace_id
        assert invoke.parent_id == cue.span_id
        assert invoke.attributes["gen_ai.operation.name"] == "invoke_agent"
        # and what it sent back links the cue span to the specialist's span
        assert (trace_id, invoke.span_id) in cue.links
    # the handoffs, forwarded by the hub: its sends link each sender's span
    assert {by_agent[a].span_id for a in AGENTS[:2]} <= linked
    assert "handoff" in cues["CODE-100"].events


def test_the_http_kind_sends_the_trace_context_on_its_call(
    redis_server: EmbeddedServer, collector: Collector, tmp_path: Path
) -> None:
    cuelist = {
        "cuelist": "hooked",
        "cues": [{"id": "CALL", "target_agents": ["caller"],
                  "action": {"url": f"{collector.url}/hook", "body": {"x": 1}}}],
    }  # fmt: skip
    with processes(_env(redis_server, collector), tmp_path) as procs:
        url = procs.hub()
        procs.spawn("caller", [*_specialist("http"), "--agent", "caller"])
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, ["caller"])
            assert api.post("/v1/cuelists", json=cuelist).status_code == 201
            run_id = api.post("/v1/runs", json={"cuelist": "hooked"}).json()["run_id"]
            assert wait_done(api, run_id)["status"] == "success"
        trace_id = run_trace_id(run_id)
        (invoke,) = eventually_sync(
            lambda: collector.named("invoke_agent caller", trace_id), 15, interval_s=0.05
        )
    (headers,) = collector.hooks
    version, trace_hex, parent_hex, flags = headers["traceparent"].split("-")
    assert (version, flags) == ("00", "01")
    assert int(trace_hex, 16) == trace_id and int(parent_hex, 16) == invoke.span_id


def _specialist(kind: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "callboard.specialist_cmd", kind]
