"""Routing and cue benchmarks on one server and on a 3-master Redis Cluster, in one run.

Both are started here (callboard/embedded.py; callboard/embedded_cluster.py: three masters
on loopback, no replicas) and stay up for the whole run. Each measurement is taken on the
single server, then at once on the cluster, so both meet the machine's other load at
about the same moments; every row prints the single server's figure, the cluster's, and
cluster / single. The measurements are bench/routing.py's (the hub's router and the bare
relay) and bench/cues.py's parts (a)-(d), through the same functions, at smaller default
sizes. The bare relay and the bare barrier run on both (a cluster client splits their
pipelines by node); Celery, part (d)'s baseline, has no cluster broker and runs on the
single server only.

    python bench/cluster.py [--only routing,a,b,c,d] [-n 20000] [--rates 2000]
                            [--repeats 30] [--runs 300] [--jobs 2000]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cues_host import celery_noops, leftover_keys
from bench._cues_run import Harness
from bench._table import print_table
from bench.cues import _medians, call_cuelist, chain_cuelist, direct_cuelist, five_cuelist
from bench.routing import pipeline
from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from protocols.process import loop_name, run

CHAIN = 20, 200, 100  # cues, prepare ms, execute ms: part (b)'s first shape


@dataclass
class Pair:
    """A figure on each: `cluster` is None when it was measured on the single server only.
    Every measurement runs on the single server, then on the cluster."""

    name: str
    unit: str
    single: float
    cluster: float | None


# -- routing (bench/routing.py) ---------------------------------------------------------------


async def routing(
    urls: tuple[str, str], total: int, rates: list[float], seconds: float
) -> list[Pair]:
    rows = []
    for via_hub, who in ((True, "hub router"), (False, "bare relay")):
        s, c = [await pipeline(url, total, 0, via_hub=via_hub) for url in urls]
        rows.append(Pair(f"routing, {total:,} handoffs, {who}: sustained", "msgs/s",
                         s["msgs_per_s"], c["msgs_per_s"]))  # fmt: skip
    for rate in rates:
        n = int(rate * seconds)
        for via_hub, who in ((True, "hub router"), (False, "bare relay")):
            s, c = [await pipeline(url, n, rate, via_hub=via_hub) for url in urls]
            for q in ("p50", "p99"):
                rows.append(Pair(f"routing at {rate:,.0f} msgs/s ({n:,}), {who}: latency {q}",
                                 "ms", s[f"{q}_ms"], c[f"{q}_ms"]))  # fmt: skip
    return rows


# -- cues (bench/cues.py) ---------------------------------------------------------------------


async def part_a(hs: tuple[Harness, Harness], n: int, repeats: int) -> list[Pair]:
    s, c = [await h.barrier(n, repeats, call_cuelist) for h in hs]
    rows = []
    for who, attr in (("hub, raw protocol agents", "raw"), ("hub, SDK echo agents", "sdk"),
                      ("bare barrier", "bare")):  # fmt: skip
        s_cycle, s_skew = _medians(getattr(s, attr))
        c_cycle, c_skew = _medians(getattr(c, attr))
        rows += [
            Pair(f"(a) {n} agents, {who}: cycle WARNING->all GO (median of {repeats})", "ms",
                 s_cycle * 1000, c_cycle * 1000),
            Pair(f"(a) {n} agents, {who}: GO skew (median)", "ms", s_skew * 1000, c_skew * 1000),
        ]  # fmt: skip
    ratio = [_medians(r.raw)[0] / _medians(r.bare)[0] for r in (s, c)]
    rows.append(Pair(f"(a) {n} agents: hub (raw agents) / bare barrier, cycle", "x", *ratio))
    return rows


async def part_b(hs: tuple[Harness, Harness]) -> list[Pair]:
    n, prepare_ms, execute_ms = CHAIN
    rows = []
    for warn_ahead in (1, 2):
        shaped = functools.partial(chain_cuelist, warn_ahead=warn_ahead)
        tag = f"b-ahead-{warn_ahead}"
        shape = [(prepare_ms, execute_ms)]
        (s,), (c,) = [await h.chain(n, shape, True, shaped, tag=tag) for h in hs]
        rows.append(Pair(f"(b) {n}-cue chain P={prepare_ms} E={execute_ms} ms, warn_ahead "
                         f"{warn_ahead}: start -> done", "s", s, c))  # fmt: skip
    return rows


async def part_c(hs: tuple[Harness, Harness], runs: int) -> list[Pair]:
    rows = []
    for raw, who in ((False, "SDK echo agents"), (True, "raw protocol agents")):
        s, c = [await h.many_runs(runs, five_cuelist, raw) for h in hs]
        rows += [
            Pair(f"(c) {runs:,} concurrent runs x 5 cues, {who}: runs/s", "runs/s",
                 s["runs_per_s"], c["runs_per_s"]),
            Pair("(c)   median run latency", "s", s["latency_p50_s"], c["latency_p50_s"]),
            Pair("(c)   hub CPU per run", "us", s["hub_us"], c["hub_us"]),
            Pair("(c)   agents process CPU per run", "us", s["agents_us"], c["agents_us"]),
        ]  # fmt: skip
    return rows


async def part_d(hs: tuple[Harness, Harness], jobs: int, prefetch: int) -> list[Pair]:
    single = hs[0].server
    assert isinstance(single, EmbeddedServer)
    celery = await celery_noops(single, jobs, prefetch)
    rows = [Pair(f"(d) Celery solo, {jobs:,} no-op tasks (single server only: no cluster "
                 "broker)", "tasks/s", celery, None)]  # fmt: skip
    for one_run in (True, False):
        s, c = [await h.direct_cues(jobs, 1, direct_cuelist, one_run, prefetch) for h in hs]
        hows = (
            [f"one run of {jobs:,} entry cues, new version", "the same version again"]
            if one_run
            else [f"{jobs:,} one-cue runs"]
        )
        for how, rs, rc in zip(hows, s, c, strict=True):
            rows += [
                Pair(f"(d) {jobs:,} direct cues, 1 echo, {how}", "cues/s",
                     rs["per_s"], rc["per_s"]),
                Pair("(d)   CPU per cue: hub", "us", rs["hub_cpu_us"], rc["hub_cpu_us"]),
                Pair("(d)   CPU per cue: echo", "us", rs["echo_cpu_us"], rc["echo_cpu_us"]),
                Pair("(d)   CPU per cue: Redis (every master of the cluster)", "us",
                     rs["redis_cpu_us"], rc["redis_cpu_us"]),
                Pair("(d)   busy: hub (CPU / wall time)", "%", rs["hub_busy"] * 100,
                     rc["hub_busy"] * 100),
            ]  # fmt: skip
    return rows


# -- the table --------------------------------------------------------------------------------


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def print_pairs(rows: list[Pair]) -> None:
    print_table(("measure", "unit", "single", "cluster", "cluster/single"), [
        (r.name, r.unit, _figure(r.single), _figure(r.cluster),
         "" if r.cluster is None or not r.single else f"{r.cluster / r.single:.2f}x")
        for r in rows
    ])  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    parts = set(args.only.split(","))
    rows: list[Pair] = []
    started = time.monotonic()
    with EmbeddedServer() as server, EmbeddedCluster() as cluster:
        print(f"single {server.url}; cluster {cluster.url} (masters on {cluster.ports}); "
              f"{server.binary}; event loops: {loop_name()}", file=sys.stderr)  # fmt: skip
        if "routing" in parts:
            rates = [float(r) for r in args.rates.split(",") if r]
            rows += await routing((server.url, cluster.url), args.messages, rates, args.seconds)
        async with Harness(server) as single, Harness(cluster) as clustered:
            hs = single, clustered
            if "a" in parts:
                for n in (int(n) for n in args.agents.split(",")):
                    rows += await part_a(hs, n, args.repeats)
            if "b" in parts:
                rows += await part_b(hs)
            if "c" in parts:
                rows += await part_c(hs, args.runs)
            if "d" in parts:
                rows += await part_d(hs, args.jobs, args.prefetch)
        left = await leftover_keys(server), await leftover_keys(cluster)
    print_pairs(rows)
    took = time.monotonic() - started
    print(f"\n(event loops: {loop_name()}; total {took:.0f} s; keys left behind: "
          f"single {left[0]}, cluster {left[1]})")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="routing,a,b,c,d", help="e.g. routing,a,d")
    parser.add_argument("-n", "--messages", type=int, default=20_000, help="routing throughput")
    parser.add_argument("--rates", default="2000", help="routing latency rates, msgs/s")
    parser.add_argument("--seconds", type=float, default=3.0, help="per routing latency rate")
    parser.add_argument("--repeats", type=int, default=30, help="cue calls per size in (a)")
    parser.add_argument("--agents", default="10", help="agent counts in (a)")
    parser.add_argument("--runs", type=int, default=300, help="concurrent runs in (c)")
    parser.add_argument("--jobs", type=int, default=2000, help="direct cues / Celery tasks (d)")
    parser.add_argument("--prefetch", type=int, default=64, help="echo and Celery prefetch (d)")
    run(main(parser.parse_args()))
