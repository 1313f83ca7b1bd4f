"""Wide cue benchmark: the hub's own CPU a message in the phases of one cue with many targets.

The pure engine (no Redis, no other process) calls one cue of N targets: every target's
ack.warning, then its ack.standby, then its status.completed (a small result), handed to
the engine one by one as the router hands a phase's answers over; each phase's outbox is
taken after it. The time of each phase is measured apart, the best of `--repeat` rounds.

Its baseline is the same cue with the fewest targets (the first `--targets`), measured in
the same run: a message costs about the same whatever the width when a phase's work grows
with its targets, and more with each target when it grows with their square (each answer
looking at every target, say). The ratio column is a wide cue's µs a message over the
narrow one's: 1.0x is linear.

    python bench/wide.py [--targets 10,50,200] [--repeat 20]
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
from hub.engine import inputs
from hub.engine.core import Engine
from hub.engine.plan import Plan
from protocols import payloads as p
from protocols.codec import Envelope, make
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.validation import load_cuelist

PHASES: tuple[tuple[T, p.Payload], ...] = (
    (T.ACK_WARNING, p.AckWarning(attempt=1)),
    (T.ACK_STANDBY, p.AckStandby(attempt=1, ready=True)),
    (T.STATUS_COMPLETED, p.StatusCompleted(attempt=1, result={"echo": {"n": 1, "ok": True}})),
)


def one_round(plan: Plan, agents: list[str]) -> dict[str, float]:
    """Seconds each phase's answers took the engine, for one call of the cue."""
    engine = Engine(Keys("bench-wide:"), clock=time.time)
    engine.start_run(plan, "run", {}, dry=False)
    engine.take()
    took: dict[str, float] = {}
    for kind, payload in PHASES:
        answers: list[Envelope] = [
            make(kind, payload, from_agent=a, run_id="run", cue_id="C") for a in agents
        ]
        start = time.perf_counter()
        for msg in answers:
            inputs.handle(engine, msg)
        took[kind.value] = time.perf_counter() - start
        engine.take()
    assert engine.runs["run"].status.done, "the cue did not complete"
    return took


def measure(width: int, repeat: int) -> dict[str, float]:
    """µs a message of each phase for a cue of `width` targets (the best round)."""
    agents = [f"agent-{i:03d}" for i in range(width)]
    plan = Plan.build(*load_cuelist({"cuelist": "wide", "cues": [
        {"id": "C", "target_agents": agents},
    ]}))  # fmt: skip
    rounds = [one_round(plan, agents) for _ in range(repeat)]
    return {kind.value: min(r[kind.value] for r in rounds) / width * 1e6 for kind, _ in PHASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--targets", default="10,50,200", help="cue widths; the first is the baseline"
    )
    parser.add_argument("--repeat", type=int, default=20, help="rounds; the best is shown")
    args = parser.parse_args()
    widths = [int(n) for n in args.targets.split(",")]
    gc.collect()
    gc.freeze()  # as a hub process does (protocols.process)
    found = {width: measure(width, args.repeat) for width in widths}
    base = found[widths[0]]
    print(f"one cue's three phases in the pure engine, best of {args.repeat} rounds; µs a "
          f"message, and against {widths[0]} targets' (1.0x: linear)")  # fmt: skip
    print_table(
        ("targets", *(f"{kind.value}" for kind, _ in PHASES), "ratio (worst phase)"),
        [
            (f"{width}", *(f"{found[width][k.value]:.1f}" for k, _ in PHASES),
             f"{max(found[width][k.value] / base[k.value] for k, _ in PHASES):.2f}x")
            for width in widths
        ],
    )  # fmt: skip


if __name__ == "__main__":
    main()
