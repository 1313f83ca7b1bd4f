"""One run of direct cues through the pure engine, stepped as the hub's driver steps it
(no Redis, no other process): the loop bench/tracer.py and bench/hubcpu.py time.

The run starts CHUNK cues a step (the rest from the backlog, a step each CHUNK); each
task.assign is answered by a `status.completed` carrying a specialist's traceparent, BATCH
a step (what the router hands the engine from one read). After every step the caller's
`written` sees the step's outbox as the driver would commit it; before the engine handles
a batch of answers, the caller's `received` turns it into the envelopes it hands over
(decoding them, or showing them to a tracer). `Stages` adds up the seconds of each named
part, so a bench can show where a cue's time went.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from bench.cues import direct_cuelist
from hub.engine import inputs
from hub.engine.base import CHUNK
from hub.engine.core import Engine
from hub.engine.outbox import Outbox
from hub.engine.plan import Plan
from protocols import payloads as p
from protocols.codec import Envelope, make
from protocols.messages import MessageType as T
from protocols.telemetry import new_span_id
from protocols.tracecontext import run_trace_id
from protocols.validation import load_cuelist

RUN_ID = "bench-run"
AGENT = "worker"
BATCH = 64  # completions a step: what the router hands the engine at once
M = TypeVar("M")


class Stages:
    """Seconds spent in each named part of a run (`with stages("go"): ...`)."""

    def __init__(self) -> None:
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def total(self, *names: str) -> float:
        return sum(self.seconds[name] for name in names)


def direct_plan(jobs: int) -> Plan:
    """The plan of one run of `jobs` direct cues to AGENT (bench/cues.py's cuelist)."""
    return Plan.build(*load_cuelist(direct_cuelist("direct-many", AGENT, jobs)))


def completions(assigns: Sequence[Envelope]) -> list[Envelope]:
    """Each assignment answered, with the context of the echo's `invoke_agent` span."""
    trace = f"00-{run_trace_id(RUN_ID):032x}-"
    replies = []
    for m in assigns:
        done = p.StatusCompleted(attempt=getattr(m.payload, "attempt", 1))
        context = f"{trace}{new_span_id():016x}-01"
        replies.append(make(T.STATUS_COMPLETED, done, from_agent=AGENT, run_id=RUN_ID,
                            cue_id=m.cue_id, traceparent=context))  # fmt: skip
    return replies


def run_direct(
    engine: Engine,
    plan: Plan,
    stages: Stages,
    written: Callable[[Outbox], None],
    answers: Callable[[list[Envelope]], list[M]],
    received: Callable[[list[M]], list[Envelope]],
) -> None:
    """One run of the plan's cues on `engine`, timed in `stages`: "start" (the run),
    "go" (the backlog's cues fired), "take" (each step's outbox), "handle" (the answers
    handed to the engine); `written` and `received` time what they do themselves.
    `answers` makes the answers to the run's assignments (untimed), as `received` takes
    them. Fails when a cue was not assigned or the run did not end."""
    assigns: list[Envelope] = []

    def step() -> None:
        with stages("take"):
            out = engine.take()
        written(out)
        assigns.extend(m for _, m in out.messages if m.message_type is T.TASK_ASSIGN)

    with stages("start"):
        engine.start_run(plan, RUN_ID, {}, dry=False, chunk=CHUNK)
    step()
    more = True
    while more:
        with stages("go"):
            more = engine.work_backlog(CHUNK)
        step()
    replies = answers(completions(assigns))
    for i in range(0, len(replies), BATCH):
        batch = received(replies[i : i + BATCH])
        with stages("handle"):
            for msg in batch:
                inputs.handle(engine, msg)
        step()
    run = engine.runs[RUN_ID]
    assert len(assigns) == len(plan.cues) and run.status.done, "the run did not finish"
