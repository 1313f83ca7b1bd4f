"""Traces in one process: the hub's run, cue and send spans and each specialist's
`invoke_agent` span form one trace, parented by id; with tracing off nothing is traced."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from hub import commands as c
from hub.service import Hub, HubSettings
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import Envelope, decode, encode
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.telemetry import Sampler
from protocols.tracecontext import (
    cue_span_id,
    parse_traceparent,
    run_span_id,
    run_trace_id,
    trace_context,
)
from protocols.validation import load_cuelist
from specialists.builtin.echo import Echo
from specialists.tracing import SpecialistTracer
from tests.helpers import eventually

pytestmark = pytest.mark.redis
ROOT = Path(__file__).resolve().parents[2]
AGENTS = ("specialist-code", "specialist-test", "specialist-deploy")


@pytest.fixture
async def running(
    settings: Settings, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Hub, InMemorySpanExporter, InMemorySpanExporter]]:
    param = getattr(request, "param", True)  # False: off; a dict: settings, tracing on
    traced = param is not False
    # ms between exports (OTEL_BSP_SCHEDULE_DELAY, default 5 s)
    update = {"otel_bsp_schedule_delay_ms": 20, **(param if isinstance(param, dict) else {})}
    settings = settings.model_copy(update=update)
    hub_spans, agent_spans = InMemorySpanExporter(), InMemorySpanExporter()
    hub = Hub(
        HubSettings(**settings.model_dump(), lease_ms=2000),
        span_exporter=hub_spans if traced else None,
    )
    stop = asyncio.Event()
    tasks = [asyncio.create_task(hub.run(stop))]
    await asyncio.wait_for(hub.leading.wait(), 10)
    echoes = []
    for agent in AGENTS:
        echo = Echo(agent, settings=settings)
        if traced:
            echo.tracer = SpecialistTracer.from_settings(settings, agent, "r1", agent_spans)
        echoes.append(echo)
        tasks.append(asyncio.create_task(echo.run()))
    try:
        yield hub, hub_spans, agent_spans
    finally:
        for echo in echoes:
            echo.stop()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)
        await hub.close()


def _handoff_chain() -> str:
    """The shipped handoff chain, its work taking no time."""
    return (
        (ROOT / "cuelists/handoff-chain.yaml")
        .read_text()
        .replace("execute_ms: 100", "execute_ms: 0")
    )


async def _run(hub: Hub, text: str, run_id: str) -> dict[str, Any]:
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    await hub.driver.start_run(parsed.cuelist, version, run_id, {}, False)

    async def done() -> Any:
        run = await hub.store.run(run_id)
        return run if run is not None and run.status.done else None

    run = await eventually(done, 20)
    return {"status": run.status.value}


async def _exported(
    hub: Hub, spans: InMemorySpanExporter, name: str, trace_id: int
) -> list[ReadableSpan]:
    """The spans named `name` of a trace, once exported: a span is emitted just after the
    write that ended it, so a reader of Redis may see the end first."""

    def found() -> list[ReadableSpan]:
        assert hub.tracer is not None
        hub.tracer.spans.flush()
        return [
            s for s in spans.get_finished_spans()
            if s.name == name and s.context.trace_id == trace_id
        ]  # fmt: skip

    return await eventually(found, 10)


def _by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


# What an agent of these tests answers to each phase of attempt 1 of its cue.
ANSWERS = {
    T.COORD_WARNING: (T.ACK_WARNING, p.AckWarning(attempt=1)),
    T.COORD_STANDBY: (T.ACK_STANDBY, p.AckStandby(attempt=1, ready=True)),
    T.COORD_GO: (T.STATUS_COMPLETED, p.StatusCompleted(attempt=1, result={"ok": 1})),
}


async def test_a_handoff_run_is_one_trace_across_hub_and_specialists(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    hub, hub_spans, agent_spans = running
    text = _handoff_chain()
    assert (await _run(hub, text, "run-traced"))["status"] == "success"
    (run,) = await _exported(hub, hub_spans, "run handoff-chain", run_trace_id("run-traced"))
    trace_id = run_trace_id("run-traced")
    assert run.context.trace_id == trace_id and run.context.span_id == run_span_id("run-traced")
    assert run.parent is None
    mine = [s for s in hub_spans.get_finished_spans() if s.context.trace_id == trace_id]
    cues = {s.attributes["callboard.cue.id"]: s for s in mine if s.name.startswith("cue ")}
    assert sorted(cues) == ["CODE-100", "DEPLOY-300", "TEST-200"]
    for cue in cues.values():
        assert cue.parent is not None and cue.parent.span_id == run.context.span_id
        names = [e.name for e in cue.events]
        assert names[:3] == ["warning", "standby", "go"] and names[-1] == "completed", names
    assert [e.name for e in cues["CODE-100"].events].count("handoff") == 1

    # each GO: a producer span under its cue, whose context the specialist continued
    def invoked() -> dict[str, ReadableSpan]:
        found = {
            str(s.attributes["gen_ai.agent.name"]): s
            for s in agent_spans.get_finished_spans()
            if s.name.startswith("invoke_agent ")
        }
        return found if len(found) == len(AGENTS) else {}

    invokes = await eventually(invoked, 10)
    assert sorted(invokes) == sorted(AGENTS)
    # what the hub wrote: one PRODUCER `send` span per step and run, under the run's span,
    # linked to the cue spans whose messages it carried
    sends = _by_name(mine, "send")
    assert sends and all(s.kind is SpanKind.PRODUCER for s in sends)
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in sends)
    assert all(s.attributes["messaging.system"] == "redis" for s in sends)
    linked = {link.context.span_id for s in sends for link in s.links}
    for cue_id, agent in zip(("CODE-100", "TEST-200", "DEPLOY-300"), AGENTS, strict=True):
        cue, invoke = cues[cue_id], invokes[agent]
        assert cue.context.span_id in linked
        # the GO carried its cue's context: the specialist's span is a child of the cue's
        assert invoke.context.trace_id == trace_id
        assert invoke.parent is not None and invoke.parent.span_id == cue.context.span_id
        assert invoke.attributes["gen_ai.operation.name"] == "invoke_agent"
        # what it sent back (started, completion, handoff) links the cue to the specialist's
        # span, once
        assert [link.context.span_id for link in cue.links].count(invoke.context.span_id) == 1
        assert all(link.context.trace_id == trace_id for link in cue.links)
    # the handoffs the hub forwarded: sent in a batch linked to each sender's span
    assert invokes["specialist-code"].context.span_id in linked
    assert invokes["specialist-test"].context.span_id in linked


@pytest.mark.parametrize("running", [False], indirect=True)
async def test_tracing_off_writes_no_traceparent_and_makes_no_span(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    hub, hub_spans, agent_spans = running
    assert hub.tracer is None and hub.driver.tracer is None
    text = _handoff_chain()
    assert (await _run(hub, text, "run-dark"))["status"] == "success"
    streams = [hub.keys.inbox(a) for a in AGENTS] + [hub.keys.out(a) for a in AGENTS]
    raw = []
    for stream in streams:
        for _, fields in await hub.transport._client.xrange(stream):
            raw.append(fields[STREAM_FIELD.encode()])
    assert len(raw) > 20
    assert not [r for r in raw if b"traceparent" in r]
    assert all(decode(r).traceparent is None for r in raw)
    assert hub_spans.get_finished_spans() == () and agent_spans.get_finished_spans() == ()


async def _played(
    hub: Hub, run_id: str, traceparents: Iterator[str],
    first: Callable[[Envelope], Awaitable[None]] | None = None,
) -> None:  # fmt: skip
    """Run `run_id` of a one-cue cuelist whose agent, mallory, is played here: it answers
    each phase with the next of `traceparents` (whatever the hub sent it), until the run
    ends; mallory's messages were routed as usual (no dead letter) and the run succeeded.
    `first` is awaited with the run's first message to mallory, before it is answered."""
    text = "cuelist: mallory\ncues:\n  - {id: ONLY, target_agents: [mallory]}\n"
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    await hub.driver.start_run("mallory", version, run_id, {}, False)
    answered: set[str] = set()

    async def answer() -> bool:
        for _, fields in await hub.transport._client.xrange(hub.keys.inbox("mallory")):
            msg = decode(fields[STREAM_FIELD.encode()])
            assert msg.traceparent is not None  # tracing is on: the hub sent its context
            if msg.run_id != run_id or msg.message_id in answered:
                continue
            if msg.message_type not in ANSWERS:
                continue
            if first is not None and not answered:
                await first(msg)
            answered.add(msg.message_id)
            mt, payload = ANSWERS[msg.message_type]
            body = json.loads(encode(msg.reply(mt, payload)))
            body["traceparent"] = next(traceparents)
            await hub.transport._client.xadd(
                hub.keys.out("mallory"), {STREAM_FIELD: json.dumps(body)}
            )
        run = await hub.store.run(run_id)
        return run is not None and run.status.done

    await eventually(answer, 20)
    run = await hub.store.run(run_id)
    assert run is not None and run.status.value == "success"
    assert await hub.transport._client.xlen(hub.keys.dead) == 0


async def test_a_malformed_traceparent_from_a_specialist_breaks_nothing(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    """A specialist played by the test answers every phase with a broken traceparent: the
    messages are routed as usual (no dead letter), the run succeeds, nothing is linked."""
    hub, hub_spans, _ = running
    bad = iter(["garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "x" * 5000])
    await _played(hub, "run-bad-trace", bad)
    (cue,) = await _exported(hub, hub_spans, "cue ONLY", run_trace_id("run-bad-trace"))
    assert [e.name for e in cue.events] == ["warning", "standby", "go", "completed"]
    assert not cue.links  # nothing to link to: every traceparent it sent was ignored
    assert cue.context.trace_id == run_trace_id("run-bad-trace")


async def test_a_cues_span_links_only_what_its_own_targets_send(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    """eve, no target of mallory's cue, answers its WARNING first, naming the cue and
    carrying a trace context of the run's own trace: the engine refuses the answer (an
    escalation, not a dead letter), and the cue's span links mallory's three answers only."""
    hub, hub_spans, _ = running
    client, run_id = hub.transport._client, "run-eve"

    async def eve_answers(warning: Envelope) -> None:
        body = json.loads(encode(warning.reply(T.ACK_WARNING, p.AckWarning(attempt=1))))
        body.update(from_agent="eve", traceparent=trace_context(run_id, 0xE5E))
        await client.xadd(hub.keys.out("eve"), {STREAM_FIELD: json.dumps(body)})

        async def routed() -> bool:  # the router has read it (and the tracer seen it)
            entries = await client.xrange(hub.keys.audit)
            return any(body["message_id"].encode() in f[STREAM_FIELD.encode()] for _, f in entries)

        await eventually(routed, 10)

    mallory = iter(trace_context(run_id, 0xC0DE + n) for n in range(10))
    await _played(hub, run_id, mallory, first=eve_answers)
    (cue,) = await _exported(hub, hub_spans, "cue ONLY", run_trace_id(run_id))
    assert {link.context.span_id for link in cue.links} == {0xC0DE, 0xC0DE + 1, 0xC0DE + 2}
    escalations = await hub.store.escalations(limit=100)
    assert any(e.cause == "not_in_run:eve" for e in escalations), escalations


async def test_a_hub_that_did_not_see_a_cue_start_reopens_its_span_under_its_id(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    """A new leadership term forgets the open spans (as a restarted or new leader knows
    none): the cue's span is re-opened at its next phase with the same id, the phases it
    missed taken from the cue's state, and ended once."""
    hub, hub_spans, _ = running
    assert hub.tracer is not None
    text = "cuelist: resumed\ncues:\n  - {id: ONLY, target_agents: [rae]}\n"
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    await hub.driver.start_run("resumed", version, "run-resumed", {}, False)
    answers = ANSWERS
    answered: set[str] = set()

    async def answer() -> bool:
        for _, fields in await hub.transport._client.xrange(hub.keys.inbox("rae")):
            msg = decode(fields[STREAM_FIELD.encode()])
            if msg.message_id in answered or msg.message_type not in answers:
                continue
            answered.add(msg.message_id)
            if msg.message_type is T.COORD_STANDBY:
                hub.tracer.reset()  # what Driver.load does when a term starts
            mt, payload = answers[msg.message_type]
            await hub.transport._client.xadd(
                hub.keys.out("rae"), {STREAM_FIELD: encode(msg.reply(mt, payload))}
            )
        run = await hub.store.run("run-resumed")
        return run is not None and run.status.done

    await eventually(answer, 20)
    (cue,) = await _exported(hub, hub_spans, "cue ONLY", run_trace_id("run-resumed"))
    assert cue.context.span_id == cue_span_id("run-resumed", "ONLY", 1)
    assert cue.parent is not None and cue.parent.span_id == run_span_id("run-resumed")
    assert [e.name for e in cue.events] == ["warning", "standby", "go", "completed"]
    resumed = [e.name for e in cue.events if (e.attributes or {}).get("callboard.resumed")]
    assert resumed == ["warning", "standby"]
    assert cue.start_time is not None and cue.start_time == cue.events[0].timestamp


async def test_a_rerun_is_a_trace_of_its_own_linked_to_the_run_it_reruns(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    hub, hub_spans, _ = running
    assert hub.tracer is not None
    text = "cuelist: again\ncues:\n  - {id: ONLY, target_agents: [specialist-deploy]}\n"
    assert (await _run(hub, text, "run-first"))["status"] == "success"
    await hub.commands.call(c.Rerun(run_id="run-first", new_run_id="run-second"))

    async def second() -> Any:
        run = await hub.store.run("run-second")
        return run is not None and run.status.done

    await eventually(second, 20)
    (rerun,) = await _exported(hub, hub_spans, "run again", run_trace_id("run-second"))
    assert rerun.parent is None and rerun.attributes is not None
    assert rerun.attributes["callboard.run.rerun_of"] == "run-first"
    (link,) = rerun.links
    assert (link.context.trace_id, link.context.span_id) == (
        run_trace_id("run-first"), run_span_id("run-first"),
    )  # fmt: skip


def _runs_by_sampler(sampler: Sampler) -> tuple[str, str]:
    """A run id the sampler keeps and one it leaves out (decided by the id alone)."""
    ids = [f"run-sampled-{i}" for i in range(64)]
    kept = next(i for i in ids if sampler.root(run_trace_id(i)))
    left_out = next(i for i in ids if not sampler.root(run_trace_id(i)))
    return kept, left_out


HALF = {"otel_traces_sampler": "traceidratio", "otel_traces_sampler_arg": "0.5"}


@pytest.mark.parametrize("running", [HALF], indirect=True)
async def test_a_run_the_sampler_leaves_out_is_not_recorded_anywhere_but_propagates(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    hub, hub_spans, agent_spans = running
    assert hub.tracer is not None and hub.tracer.sampler.rate == 0.5
    kept, left_out = _runs_by_sampler(hub.tracer.sampler)
    text = _handoff_chain()
    assert (await _run(hub, text, left_out))["status"] == "success"
    assert (await _run(hub, text, kept))["status"] == "success"
    await _exported(hub, hub_spans, "run handoff-chain", run_trace_id(kept))

    def invoked(run_id: str) -> list[ReadableSpan]:
        return [
            s for s in agent_spans.get_finished_spans()
            if s.context.trace_id == run_trace_id(run_id)
        ]  # fmt: skip

    # the kept run: recorded by the hub and by every specialist, as with no sampler
    assert len(await eventually(lambda: len(invoked(kept)) == len(AGENTS) and invoked(kept), 10))
    # the other: no span anywhere (its spans would have ended, and gone, before the kept one's)
    gone = run_trace_id(left_out)
    assert not [s for s in hub_spans.get_finished_spans() if s.context.trace_id == gone]
    assert invoked(left_out) == []
    # but its context went with every message of the run, both ways, flagged unsampled
    flags: dict[str, set[str]] = {kept: set(), left_out: set()}
    for agent in AGENTS:
        for stream in (hub.keys.inbox(agent), hub.keys.out(agent)):
            for _, fields in await hub.transport._client.xrange(stream):
                msg = decode(fields[STREAM_FIELD.encode()])
                if msg.run_id in flags and msg.traceparent is not None:
                    trace_id, _, sampled = parse_traceparent(msg.traceparent)
                    assert trace_id == run_trace_id(msg.run_id)
                    flags[msg.run_id].add(f"{msg.message_type.value}:{sampled}")
    assert flags[kept] and all(f.endswith(":True") for f in flags[kept])
    assert {f.split(":")[0] for f in flags[left_out]} == {f.split(":")[0] for f in flags[kept]}
    assert all(f.endswith(":False") for f in flags[left_out])


@pytest.mark.parametrize("running", [HALF], indirect=True)
async def test_a_specialist_cannot_make_the_hub_record_a_run_the_sampler_left_out(
    running: tuple[Hub, InMemorySpanExporter, InMemorySpanExporter],
) -> None:
    """mallory answers every phase of a left-out run with that run's trace context
    flagged sampled (`-01`), as if recording it: the hub still records nothing of the run
    (the sampler decides by the run id, and a reply only links to a span already open).
    A kept run played the same way afterwards is recorded, so the export was reached."""
    hub, hub_spans, _ = running
    assert hub.tracer is not None
    kept, left_out = _runs_by_sampler(hub.tracer.sampler)
    flagged = iter(trace_context(left_out, 0x5EED + n, sampled=True) for n in range(10))
    await _played(hub, left_out, flagged)
    honest = iter(trace_context(kept, 0xC0DE + n, sampled=True) for n in range(10))
    await _played(hub, kept, honest)
    (cue,) = await _exported(hub, hub_spans, "cue ONLY", run_trace_id(kept))
    assert {link.context.span_id for link in cue.links} == {0xC0DE, 0xC0DE + 1, 0xC0DE + 2}
    await _exported(hub, hub_spans, "run mallory", run_trace_id(kept))
    gone = run_trace_id(left_out)
    assert not [s for s in hub_spans.get_finished_spans() if s.context.trace_id == gone]


def test_the_go_events_shared_attributes_are_bounded() -> None:
    """`fired_by` may name any operator: its shared attributes are kept for a few values."""
    from hub.tracing import _FIRED_BY, MAX_FIRED_BY, _fired_by

    for i in range(MAX_FIRED_BY * 2 + 3):
        assert dict(_fired_by(f"operator-{i}")) == {"callboard.go.fired_by": f"operator-{i}"}
        assert len(_FIRED_BY) <= MAX_FIRED_BY
    assert _fired_by("auto") is _fired_by("auto")
    assert dict(_fired_by(None)) == {"callboard.go.fired_by": None}


def test_the_bytes_runs_cue_spans_share_are_kept_for_a_bounded_number_of_runs() -> None:
    """A run's cue spans share their trace, parent and run id, written once and kept while
    the run goes on: a hub that sees many runs it never ends (another hub took over)
    keeps a bounded number, and a new term keeps none."""
    from hub.tracing import MAX_FAMILIES, HubTracer
    from protocols.telemetry import Spans

    tracer = HubTracer(Spans(Settings(tracing=True, otel_traces_exporter="none"), "hub"))
    try:
        assert tracer.spans.encoded
        first = tracer._siblings("run-0")
        assert tracer._siblings("run-0") is first
        for i in range(MAX_FAMILIES * 2 + 3):
            tracer._siblings(f"run-{i}")
            assert len(tracer._families) <= MAX_FAMILIES
        tracer.reset()
        assert not tracer._families
    finally:
        tracer.shutdown()
