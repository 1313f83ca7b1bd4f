"""Tracing benchmark: the direct-cue rate with tracing off and on, beside the code before it.

The measure is bench/cues.py (d): one run of `--jobs` direct cues through one echo
specialist process, the hub in its own process, the cuelist's plan already compiled (the
second run of a version), cues/s from the start to the last completion. Modes:

  today  the same measure on a copy of the code before tracing existed (`--baseline-tree
         DIR`, e.g. `git archive 8fa30ce | tar -x -C DIR`); skipped without it
  off    this code, tracing off (the default: nothing configured)
  on     this code, tracing on in the hub and the echo (CALLBOARD_TRACING=1): every span
         made, traceparents on the messages, the batch processor, and a no-op exporter
         (OTEL_TRACES_EXPORTER=none): the cost of tracing in callboard's own processes
  otlp   the same, exported for real: OTLP over HTTP (protobuf) to a sink this process
         serves on loopback, which answers 200 and throws the spans away (the protobuf
         encoding runs in each process's export thread, on the same 2 cores)
  unsampled  tracing on, as `on`, with the run left out by the head sampler
         (OTEL_TRACES_SAMPLER=always_off): no span is made, the context still goes on
         every message (flagged unsampled); what a run costs that a ratio sampler drops

Each round runs every mode once, in a fresh worker process with its own server; rounds
alternate modes so all meet the same load on a shared machine. It prints the median
cues/s of each mode and the ratios off/today and on/off (targets: off does not move, on
loses less than 15%): of the medians, of the best rounds, and the median (and range) of
each round's own ratio, its two measures taken one after the other.

With `--paired N`, off and on instead run side by side in one worker: a hub and an echo
of each mode on one server, both warm, measured in turn N times each (the order
alternating), and the ratios taken pair by pair. On a machine whose speed moves between
rounds (this one's did by up to 1.6x within a minute) a pair's two measures, seconds
apart, meet the same machine; a round's, each in its own processes, may not.

    python bench/tracing.py [--rounds 3] [--jobs 5000] [--baseline-tree DIR] [--only on,...]
    python bench/tracing.py --paired 8 --jobs 3000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # last: a worker's tree (its PYTHONPATH) still comes first
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from tests.webserver import Answer, Request, serving

ROOT = Path(__file__).resolve().parent.parent
TRACING_ENV = ("CALLBOARD_TRACING", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
               "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED")  # fmt: skip


class Sink:
    """An OTLP/HTTP endpoint that accepts every export and keeps only the byte count."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.url = ""

    def __call__(self, request: Request) -> Answer:
        self.requests += 1
        self.bytes += len(request.body)
        return Answer(200, b"", "application/x-protobuf")


def run_worker(mode: str, tree: Path, jobs: int, prefetch: int, sink: Sink) -> dict[str, float]:
    """One measure in a fresh process importing the code of `tree` (its children too)."""
    env = {k: v for k, v in os.environ.items() if k not in TRACING_ENV}
    env["PYTHONPATH"] = str(tree)
    if mode == "on":
        env.update(CALLBOARD_TRACING="1", OTEL_TRACES_EXPORTER="none")
    elif mode == "otlp":
        env.update(CALLBOARD_TRACING="1", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=sink.url)
    elif mode == "unsampled":
        env.update(CALLBOARD_TRACING="1", OTEL_TRACES_EXPORTER="none",
                   OTEL_TRACES_SAMPLER="always_off")  # fmt: skip
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree),
            "--jobs", str(jobs), "--prefetch", str(prefetch)]  # fmt: skip
    done = subprocess.run(argv, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def paired_worker(jobs: int, prefetch: int, pairs: int) -> dict[str, list[dict[str, float]]]:
    """Tracing off and on side by side: a hub and an echo of each on one server, both warm,
    measured in turn (`pairs` times each, the order alternating), so each pair of measures
    meets the same machine. The environment each hub and echo starts with decides its mode."""
    from bench._cues_run import Harness
    from bench.cues import direct_cuelist
    from callboard.embedded import EmbeddedServer
    from protocols.ids import new_id

    saved = {k: os.environ.get(k) for k in TRACING_ENV}
    found: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    with EmbeddedServer() as server:
        async with Harness(server) as h, contextlib.AsyncExitStack() as stack:
            systems = {}
            for mode in found:
                for k in TRACING_ENV:
                    os.environ.pop(k, None)
                if mode == "on":
                    os.environ.update(CALLBOARD_TRACING="1", OTEL_TRACES_EXPORTER="none")
                prefix = h.prefix()
                hub = await stack.enter_async_context(h.hub(prefix, tag=f"paired-{mode}"))
                echo = await stack.enter_async_context(h.echo(prefix, "worker", 1, prefetch))
                name, version = await h.put(prefix, direct_cuelist("direct-many", "worker", jobs))
                await h._direct(prefix, name, version, [new_id()], hub, echo, jobs)  # warm
                systems[mode] = (prefix, name, version, hub, echo)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            for i in range(pairs):
                for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                    prefix, name, version, hub, echo = systems[mode]
                    one = await h._direct(prefix, name, version, [new_id()], hub, echo, jobs)
                    found[mode].append(one)
    return found


def paired(args: argparse.Namespace) -> None:
    argv = [sys.executable, str(Path(__file__).resolve()), "--paired-worker", str(args.paired),
            "--jobs", str(args.jobs), "--prefetch", str(args.prefetch)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in TRACING_ENV}
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"paired worker failed:\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    off, on = found["off"], found["on"]
    rate = sorted(b["per_s"] / a["per_s"] for a, b in zip(off, on, strict=True))
    cpu = sorted(
        (b["hub_cpu_us"] + b["echo_cpu_us"]) / (a["hub_cpu_us"] + a["echo_cpu_us"])
        for a, b in zip(off, on, strict=True)
    )
    for mode, rs in found.items():
        print(f"  {mode:>3}: {statistics.median(r['per_s'] for r in rs):>8,.0f} cues/s median "
              f"({min(r['per_s'] for r in rs):,.0f}-{max(r['per_s'] for r in rs):,.0f})   CPU per "
              f"cue: hub {statistics.median(r['hub_cpu_us'] for r in rs):,.0f} us, echo "
              f"{statistics.median(r['echo_cpu_us'] for r in rs):,.0f} us")  # fmt: skip
    print(f"direct cues, tracing off and on side by side: {args.paired} pairs of one run of "
          f"{args.jobs:,} through 1 echo process each")  # fmt: skip
    print(
        f"  on / off, pair by pair: rate {statistics.median(rate):.3f}x median "
        f"({rate[0]:.3f}x-{rate[-1]:.3f}x), CPU per cue (hub + echo) "
        f"{statistics.median(cpu):.3f}x ({cpu[0]:.3f}x-{cpu[-1]:.3f}x)  target: < 15% slower"
    )


async def worker(tree: Path, jobs: int, prefetch: int) -> dict[str, float]:
    from bench._cues_run import Harness
    from bench.cues import direct_cuelist
    from callboard.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        async with Harness(server) as h:
            _, same_version = await h.direct_cues(jobs, 1, direct_cuelist, True, prefetch)
    return same_version


def main(args: argparse.Namespace) -> None:
    trees = {"off": ROOT, "on": ROOT, "otlp": ROOT, "unsampled": ROOT}
    if args.baseline_tree:
        trees = {"today": Path(args.baseline_tree).resolve(), **trees}
    if args.only:
        trees = {m: t for m, t in trees.items() if m in args.only.split(",") or m == "off"}
    sink = Sink()
    found: dict[str, list[dict[str, float]]] = {mode: [] for mode in trees}
    with serving(sink) as url:
        sink.url = f"{url}/v1/traces"
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for mode in order:
                result = run_worker(mode, trees[mode], args.jobs, args.prefetch, sink)
                found[mode].append(result)
                print(f"round {r + 1} {mode:>9}: {result['per_s']:,.0f} cues/s "
                      f"(hub {result['hub_cpu_us']:,.0f} us, echo {result['echo_cpu_us']:,.0f} "
                      "us CPU per cue)", file=sys.stderr)  # fmt: skip
    rate = {mode: statistics.median(r["per_s"] for r in rs) for mode, rs in found.items()}
    best = {mode: max(r["per_s"] for r in rs) for mode, rs in found.items()}
    cpu = {
        mode: (statistics.median(r["hub_cpu_us"] for r in rs),
               statistics.median(r["echo_cpu_us"] for r in rs))
        for mode, rs in found.items()
    }  # fmt: skip
    print(f"direct cues: one run of {args.jobs:,} through 1 echo process, median of "
          f"{args.rounds} rounds")  # fmt: skip
    for mode in found:
        hub_us, echo_us = cpu[mode]
        print(f"  {mode:>9}: {rate[mode]:>8,.0f} cues/s (best {best[mode]:,.0f})   CPU per cue: "
              f"hub {hub_us:,.0f} us, echo {echo_us:,.0f} us")  # fmt: skip
    # The rate swings with whatever else the machine runs; the CPU each cue costs the hub and
    # the echo moves much less, and it is what tracing adds: both ratios are printed.
    pairs = [("off", "today", "does not move"), ("on", "off", "< 15% slower"),
             ("otlp", "off", ""), ("unsampled", "off", "")]  # fmt: skip
    for mode, base, target in pairs:
        if mode not in rate or base not in rate:
            continue
        used = sum(cpu[mode]) / sum(cpu[base])
        ratio, best_ratio = rate[mode] / rate[base], best[mode] / best[base]
        # each round's two measures ran one after the other: their ratio cancels the drift
        # of the machine's speed between rounds
        paired = sorted(
            a["per_s"] / b["per_s"] for a, b in zip(found[mode], found[base], strict=True)
        )
        aim = f"  target: {target}" if target else ""
        print(f"  {mode} / {base}: rate {ratio:.3f}x (best {best_ratio:.3f}x; round by round "
              f"{statistics.median(paired):.3f}x, {paired[0]:.3f}x-{paired[-1]:.3f}x), "
              f"CPU per cue (hub + echo) {used:.3f}x{aim}")  # fmt: skip
    print(f"  (the sink took {sink.requests} OTLP exports, {sink.bytes / 1e6:.1f} MB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=5000, help="direct cues per measure")
    parser.add_argument("--prefetch", type=int, default=64, help="entries the echo may hold")
    parser.add_argument("--baseline-tree", default=None,
                        help="a copy of the code before tracing, for the `today` row")  # fmt: skip
    parser.add_argument("--only", default=None, help="modes to run, e.g. off,on")
    parser.add_argument("--paired", type=int, default=0,
                        help="instead: this many pairs of off and on, side by side")  # fmt: skip
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--paired-worker", type=int, default=0, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.paired_worker:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(asyncio.run(paired_worker(ns.jobs, ns.prefetch, ns.paired_worker))))
    elif ns.paired:
        paired(ns)
    elif ns.worker:
        tree = Path(ns.worker)
        sys.path.insert(0, str(tree))
        print(json.dumps(asyncio.run(worker(tree, ns.jobs, ns.prefetch))))
    else:
        main(ns)
