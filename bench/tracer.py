"""Tracer benchmark: the hub tracer's own CPU per direct cue, in one process, beside the
engine's.

The pure engine (hub.engine.core.Engine: no Redis, no other process) runs one run of
`--jobs` direct cues as the driver does: started CHUNK cues a step, each GO answered by a
`status.completed` that carries a specialist's traceparent, 64 a step (a batch the router
reads). With tracing on, the hub's tracer (hub.tracing.HubTracer, exporter `none`: every
span written as its OTLP bytes, none sent) sees each step as the driver shows it:
`received` before the engine handles a batch, `stamp` and `committed` around the step's
write (here, none). The engine's steps and the tracer's calls are timed apart. Each round
runs tracing off, then on; the best round of each is shown.

What it shows that bench/tracing.py cannot: the tracer's own code, with no other process
on the cores, so a figure that moves with that code and not with the machine's load. What
it leaves out, and bench/tracing.py measures: decoding and encoding envelopes a
traceparent makes longer, the write, the export thread, and a busy machine.

    python bench/tracer.py [--jobs 3000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._table import print_table
from bench.cues import direct_cuelist
from hub.engine import inputs
from hub.engine.base import CHUNK
from hub.engine.core import Engine
from hub.engine.plan import Plan
from hub.tracing import HubTracer
from protocols import payloads as p
from protocols.codec import Envelope, make
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.telemetry import Spans, new_span_id
from protocols.tracecontext import run_trace_id
from protocols.validation import load_cuelist

RUN_ID = "bench-run"
AGENT = "worker"
BATCH = 64  # completions a step: what the router hands the engine at once


def completions(assigns: list[Envelope]) -> list[Envelope]:
    """Each assignment answered, with the context of the echo's `invoke_agent` span."""
    trace = f"00-{run_trace_id(RUN_ID):032x}-"
    replies = []
    for m in assigns:
        done = p.StatusCompleted(attempt=getattr(m.payload, "attempt", 1))
        context = f"{trace}{new_span_id():016x}-01"
        replies.append(make(T.STATUS_COMPLETED, done, from_agent=AGENT, run_id=RUN_ID,
                            cue_id=m.cue_id, traceparent=context))  # fmt: skip
    return replies


def one_round(plan: Plan, traced: bool) -> tuple[float, float]:
    """(the engine's seconds, the tracer's seconds) for one run of the plan's cues."""
    engine = Engine(Keys("bench-tracer:"), clock=time.time)
    settings = Settings(tracing=True, otel_traces_exporter="none")
    tracer = HubTracer(Spans(settings, "callboard-hub")) if traced else None
    in_engine = in_tracer = 0.0

    def written() -> list[Envelope]:
        """The step's outbox, as the driver takes it (and the tracer sees it)."""
        nonlocal in_engine, in_tracer
        t0 = time.perf_counter()
        out = engine.take()
        t1 = time.perf_counter()
        if tracer is not None:
            tracer.stamp(out, engine)
            tracer.committed(out, engine)
        in_engine += t1 - t0
        in_tracer += time.perf_counter() - t1
        return [m for _, m in out.messages if m.message_type is T.TASK_ASSIGN]

    t0 = time.perf_counter()
    engine.start_run(plan, RUN_ID, {}, dry=False, chunk=CHUNK)
    in_engine += time.perf_counter() - t0
    assigns = written()
    while True:
        t0 = time.perf_counter()
        more = engine.work_backlog(CHUNK)
        in_engine += time.perf_counter() - t0
        assigns += written()
        if not more:
            break
    replies = completions(assigns)
    for i in range(0, len(replies), BATCH):
        batch = replies[i : i + BATCH]
        if tracer is not None:
            t0 = time.perf_counter()
            tracer.received(batch, engine)
            in_tracer += time.perf_counter() - t0
        t0 = time.perf_counter()
        for msg in batch:
            inputs.handle(engine, msg)
        in_engine += time.perf_counter() - t0
        written()
    run = engine.runs[RUN_ID]
    assert len(assigns) == len(plan.cues) and run.status.done, "the run did not finish"
    if tracer is not None:
        tracer.shutdown()
    return in_engine, in_tracer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="direct cues in the run")
    parser.add_argument("--repeat", type=int, default=7, help="rounds (off, then on)")
    args = parser.parse_args()
    plan = Plan.build(*load_cuelist(direct_cuelist("direct-many", AGENT, args.jobs)))
    off: list[float] = []
    on: list[tuple[float, float]] = []
    gc.collect()
    gc.freeze()  # as a hub process does (protocols.process)
    for _ in range(args.repeat):
        off.append(one_round(plan, traced=False)[0])
        on.append(one_round(plan, traced=True))
    engine_off = min(off) / args.jobs * 1e6
    engine_on, tracer = (s / args.jobs * 1e6 for s in min(on, key=sum))
    print(f"{args.jobs:,} direct cues in one run, best of {args.repeat} rounds; µs per cue")
    print_table(("measure", "µs per cue", "vs the engine off"), [
        ("engine, tracing off", f"{engine_off:.1f}", ""),
        ("engine, tracing on (the tracer's calls apart)", f"{engine_on:.1f}",
         f"{engine_on / engine_off:.2f}x"),
        ("the hub tracer's own calls", f"{tracer:.1f}", f"+{tracer / engine_off:.0%}"),
        ("engine and tracer, tracing on", f"{engine_on + tracer:.1f}",
         f"{(engine_on + tracer) / engine_off:.2f}x"),
    ])  # fmt: skip


if __name__ == "__main__":
    main()
