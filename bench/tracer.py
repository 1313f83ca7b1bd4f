"""Tracer benchmark: the hub tracer's own CPU per direct cue, in one process, beside the
engine's.

The pure engine (hub.engine.core.Engine: no Redis, no other process) runs one run of
`--jobs` direct cues as the driver does (bench/_direct.py): started CHUNK cues a step,
each GO answered by a `status.completed` that carries a specialist's traceparent, 64 a
step (a batch the router reads). With tracing on, the hub's tracer (hub.tracing.HubTracer,
exporter `none`: every span written as its OTLP bytes, none sent) sees each step as the
driver shows it: `received` before the engine handles a batch, `stamp` and `committed`
around the step's write (here, none). The engine's steps and the tracer's calls are timed
apart. Each round runs tracing off, then on; the best round of each is shown.

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

from bench._direct import Stages, direct_plan, run_direct
from bench._table import print_table
from hub.engine.core import Engine
from hub.engine.outbox import Outbox
from hub.engine.plan import Plan
from hub.tracing import HubTracer
from protocols.codec import Envelope
from protocols.keys import Keys
from protocols.settings import Settings
from protocols.telemetry import Spans

ENGINE = ("start", "go", "take", "handle")  # the engine's stages (bench._direct)


def one_round(plan: Plan, traced: bool) -> tuple[float, float]:
    """(the engine's seconds, the tracer's seconds) for one run of the plan's cues."""
    engine = Engine(Keys("bench-tracer:"), clock=time.time)
    settings = Settings(tracing=True, otel_traces_exporter="none")
    tracer = HubTracer(Spans(settings, "callboard-hub")) if traced else None
    stages = Stages()

    def written(out: Outbox) -> None:
        """The step's outbox, as the tracer sees it around the driver's write."""
        if tracer is not None:
            with stages("tracer"):
                tracer.stamp(out, engine)
                tracer.committed(out, engine)

    def received(batch: list[Envelope]) -> list[Envelope]:
        if tracer is not None:
            with stages("tracer"):
                tracer.received(batch, engine)
        return batch

    run_direct(engine, plan, stages, written, lambda replies: replies, received)
    if tracer is not None:
        tracer.shutdown()
    return stages.total(*ENGINE), stages.total("tracer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="direct cues in the run")
    parser.add_argument("--repeat", type=int, default=7, help="rounds (off, then on)")
    args = parser.parse_args()
    plan = direct_plan(args.jobs)
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
