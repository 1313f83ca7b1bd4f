"""Hub code benchmark: the hub's own CPU per direct cue, stage by stage, in one process.

The pure engine runs one run of `--jobs` direct cues as the hub's driver steps it
(bench/_direct.py), and each step is carried as far as the hub carries it before the
socket: the fenced commit's operations (FencedCommit.ops: the run's hash fields, each
message encoded, the events), their words for the commit script with each key replaced by
its index (hub.store.ops.flat), and the EVALSHA packed by hiredis. The answers come as the
bytes a specialist writes, decoded (protocols.codec.decode: envelope and payload
validated) before the engine handles them. Each stage is timed apart; the best of
`--repeat` rounds is shown, in µs per cue.

What it shows that bench/cues.py (d) cannot: the hub's own code for a cue, with no other
process on the cores and no I/O, so a figure that moves with that code and not with the
machine's load. What it leaves out, and (d) measures: the sockets and the event loop, the
router's reads and acks, the driver's group commit and timers, the metrics. The
difference between the two is what those cost.

    python bench/hubcpu.py [--jobs 3000] [--repeat 7] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hiredis import pack_command

from bench._direct import Stages, direct_plan, run_direct
from bench._table import print_table
from hub.engine.core import Engine
from hub.engine.outbox import Outbox
from hub.engine.plan import Plan
from hub.store.commit import FencedCommit
from hub.store.ops import COMMIT_ID_TTL_MS, flat
from protocols.codec import Envelope, decode, encode
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.transport import Storage, connect

# (stage, what it is), in the order a cue meets them
STAGES = (
    ("start", "the run started (its cues' state made)"),
    ("go", "each cue fired: its GO and task.assign"),
    ("take", "each step's outbox taken"),
    ("ops", "the commit's operations (state, messages, events)"),
    ("pack", "their words for the script, packed"),
    ("decode", "each answer decoded and validated"),
    ("handle", "each answer handled: the cue completed"),
)
LEASE = "bench-lease"


def one_round(plan: Plan, commit: FencedCommit, keys: Keys) -> Stages:
    """The stages' seconds for one run of the plan's cues."""
    engine = Engine(keys, clock=time.time)
    stages = Stages()

    def written(out: Outbox) -> None:
        """The step's write, up to the bytes the client would send."""
        with stages("ops"):
            ops = commit.ops(out, engine)
        with stages("pack"):
            script_keys = [keys.leader(0), keys.commit(new_id(), 0)]
            words = flat(ops, script_keys)
            pack_command(("EVALSHA", "0" * 40, len(script_keys), *script_keys, LEASE,
                          COMMIT_ID_TTL_MS, *words))  # fmt: skip

    def answers(replies: list[Envelope]) -> list[bytes]:
        return [encode(m) for m in replies]

    def received(batch: list[bytes]) -> list[Envelope]:
        with stages("decode"):
            return [decode(data) for data in batch]

    run_direct(engine, plan, stages, written, answers, received)
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="direct cues in the run")
    parser.add_argument("--repeat", type=int, default=7, help="rounds; the best is shown")
    parser.add_argument("--profile", help="also dump one round's cProfile stats here")
    args = parser.parse_args()
    plan = direct_plan(args.jobs)
    keys = Keys("bench-hubcpu:")
    # a client that never connects: the commit's script is only registered (its SHA)
    commit = FencedCommit(Storage(connect("redis://127.0.0.1:9/0")), keys)
    gc.collect()
    gc.freeze()  # as a hub process does (protocols.process)
    rounds = [one_round(plan, commit, keys) for _ in range(args.repeat)]
    best = min(rounds, key=lambda s: s.total(*(name for name, _ in STAGES)))
    total = best.total(*(name for name, _ in STAGES))
    print(f"{args.jobs:,} direct cues in one run, best of {args.repeat} rounds; µs per cue")
    rows = [
        (name, what, f"{best.seconds[name] / args.jobs * 1e6:.1f}",
         f"{best.seconds[name] / total:.0%}")
        for name, what in STAGES
    ]  # fmt: skip
    rows.append(("all", "the hub's own code for a cue", f"{total / args.jobs * 1e6:.1f}", ""))
    print_table(("stage", "what", "µs per cue", "share"), rows)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(one_round, plan, commit, keys)
        profiler.dump_stats(args.profile)
        print(f"cProfile stats of one round: {args.profile}")


if __name__ == "__main__":
    main()
