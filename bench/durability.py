"""What `appendfsync always` costs: concurrent 5-cue runs per second with Redis's AOF
fsynced once a second (`everysec`, the default: a power cut can lose up to about a second
of acknowledged writes) and on every write (`always`: nothing acknowledged is lost).

Each setting gets a redis-server of its own (AOF on, in a temporary directory, so the disk
is the machine's), the same hub and echo agents as bench/cues.py part (c), and the two
alternate `--repeats` times so both meet the same load on a shared machine.

    python bench/durability.py [--runs 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cues_run import Harness
from bench.cues import five_cuelist
from callboard.embedded import EmbeddedServer

SETTINGS = ("everysec", "always")


async def runs_per_s(fsync: str, runs: int) -> float:
    with EmbeddedServer(appendonly=True, extra_args=["--appendfsync", fsync]) as server:
        async with Harness(server) as h:
            result = await h.many_runs(runs, five_cuelist, raw=False)
    return float(result["runs_per_s"])


async def main(args: argparse.Namespace) -> None:
    seen: dict[str, list[float]] = {s: [] for s in SETTINGS}
    for i in range(args.repeats):
        for fsync in SETTINGS:
            rate = await runs_per_s(fsync, args.runs)
            seen[fsync].append(rate)
            print(f"repeat {i + 1}: appendfsync {fsync}: {rate:,.0f} runs/s", file=sys.stderr)
    every, always = statistics.median(seen["everysec"]), statistics.median(seen["always"])
    print(f"\n{args.runs:,} concurrent runs x 5 cues, median of {args.repeats}:")
    for fsync in SETTINGS:
        low, high = min(seen[fsync]), max(seen[fsync])
        print(f"  appendfsync {fsync:8} {statistics.median(seen[fsync]):7,.0f} runs/s "
              f"({low:,.0f}-{high:,.0f})")  # fmt: skip
    print(f"  always / everysec: {always / every:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500, help="concurrent runs per measure")
    parser.add_argument("--repeats", type=int, default=3, help="measures of each setting")
    asyncio.run(main(parser.parse_args()))
