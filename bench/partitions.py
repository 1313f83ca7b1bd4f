"""Partitions benchmark: cues/s and each hub's CPU with 1 and then 2 hubs on 2 engine partitions.

Each round starts, on one embedded server under a fresh prefix, the hub process(es)
(`python -m hub.main`, CALLBOARD_PARTITIONS=2) and one echo specialist process per agent,
then starts `--runs` runs of a `--cues`-cue chain at once through the command streams (as
POST /v1/runs would, each to its run's partition) and waits until no run is active. It
prints cues/s from the first start to the last completion and the CPU each hub process
spent (seconds, µs per cue), then the 2-hub/1-hub ratios. The shapes alternate across
rounds so both meet the same load on a shared machine.

On a 2-core machine the hubs, the agents, Redis and this process share two cores: the
figure to read is the engine's CPU divided between the hubs, not a speed-up.

    python bench/partitions.py [--runs 1000] [--cues 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cues_host import cpu_s, delete_prefix, end, spawn
from callboard.embedded import EmbeddedServer, free_port
from hub.commands import CommandClient, StartRun
from hub.store.commands import CommandStore
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.transport import Storage, connect

PARTITIONS = 2
AGENTS = ["pa-1", "pa-2", "pa-3"]
START_S = 30.0


def chain(cues: int) -> dict[str, Any]:
    """A chain of `cues` cues over the agents in turn, each after the one before."""
    return {
        "cuelist": "chain",
        "cues": [
            {"id": f"C{i}", "target_agents": [AGENTS[i % len(AGENTS)]],
             **({"depends_on": [f"C{i - 1}"]} if i else {})}
            for i in range(cues)
        ],
    }  # fmt: skip


async def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def one_round(server: EmbeddedServer, hubs: int, runs: int, cues: int) -> dict[str, float]:
    prefix = f"bp{uuid.uuid4().hex[:8]}:"
    keys = Keys(prefix)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")},
        "REDIS_URL": server.url, "CALLBOARD_PREFIX": prefix,
        "CALLBOARD_PARTITIONS": str(PARTITIONS), "CALLBOARD_LOG_LEVEL": "WARNING",
    }  # fmt: skip
    client = connect(server.url)
    procs = []
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in `finally`, after the children)
    try:
        ports = [free_port() for _ in range(hubs)]
        hub_procs = [
            spawn([sys.executable, "-m", "hub.main", "--port", str(port)], env, log)
            for port in ports
        ]
        procs += hub_procs
        procs += [
            spawn([sys.executable, "-m", "callboard.specialist_cmd", "echo", "--agent", agent,
                   "--concurrency", "16"], env, log)
            for agent in AGENTS
        ]  # fmt: skip
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        async with httpx.AsyncClient(timeout=5) as api:

            async def shared_out() -> bool:
                try:
                    led = [len((await api.get(f"{u}/healthz")).json()["partitions"]) for u in urls]
                except (httpx.HTTPError, KeyError, ValueError):
                    return False
                return sum(led) == PARTITIONS and min(led) == PARTITIONS // hubs

            await _until(shared_out, START_S, "the hubs share the partitions out")

            async def registered() -> bool:
                found = (await api.get(f"{urls[0]}/v1/agents")).json()["data"]
                return {a["agent"] for a in found if a["replicas"]} >= set(AGENTS)

            await _until(registered, START_S, "the agents registered")
            put = await api.post(f"{urls[0]}/v1/cuelists", json=chain(cues))
            version = put.json()["version"]
        db = Storage(client)
        commands = CommandClient([CommandStore(db, keys, p) for p in range(PARTITIONS)])
        run_ids = [new_id() for _ in range(runs)]

        async def idle() -> bool:
            active = [await client.scard(keys.active_runs(p)) for p in range(PARTITIONS)]
            return sum(active) == 0

        before = [cpu_s(p.pid) for p in hub_procs]
        t0 = time.monotonic()
        for run_id in run_ids:
            start = StartRun(cuelist="chain", version=version, run_id=run_id)
            (partition,) = await commands.partitions_of(start)
            await commands.send(start, partition)  # its answer is not waited for
        await _until(idle, 600, "every run finished")
        wall = time.monotonic() - t0
        hub_cpu = [cpu_s(p.pid) - b for p, b in zip(hub_procs, before, strict=True)]
    finally:
        for proc in procs:
            end(proc)
        await delete_prefix(client, prefix)
        await client.aclose()
        log.close()
    total = runs * cues
    return {
        "cues_per_s": total / wall,
        **{f"hub{i}_cpu_s": cpu for i, cpu in enumerate(hub_cpu)},
        **{f"hub{i}_us_per_cue": cpu / total * 1e6 for i, cpu in enumerate(hub_cpu)},
        "hubs_us_per_cue": sum(hub_cpu) / total * 1e6,
    }


async def main(args: argparse.Namespace) -> None:
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with EmbeddedServer() as server:
        for r in range(args.rounds):
            for hubs in (1, 2) if r % 2 == 0 else (2, 1):
                results[hubs].append(await one_round(server, hubs, args.runs, args.cues))
    print(f"{args.runs} runs x {args.cues} cues, {PARTITIONS} partitions, "
          f"{args.rounds} rounds (median; range)")  # fmt: skip

    def med(hubs: int, key: str) -> float:
        return statistics.median(r[key] for r in results[hubs])

    def rng(hubs: int, key: str) -> str:
        vals = [r[key] for r in results[hubs]]
        return f"{min(vals):,.0f}-{max(vals):,.0f}"

    for hubs in (1, 2):
        per_hub = ", ".join(
            f"hub {i}: {med(hubs, f'hub{i}_cpu_s'):.2f} s CPU, "
            f"{med(hubs, f'hub{i}_us_per_cue'):.0f} us/cue"
            for i in range(hubs)
        )
        print(f"  {hubs} hub{'s' if hubs > 1 else ''}: {med(hubs, 'cues_per_s'):,.0f} cues/s "
              f"({rng(hubs, 'cues_per_s')}); {per_hub}; all hubs "
              f"{med(hubs, 'hubs_us_per_cue'):.0f} us/cue")  # fmt: skip
    biggest = max(med(2, "hub0_cpu_s"), med(2, "hub1_cpu_s")) / med(1, "hub0_cpu_s")
    every = med(2, "hubs_us_per_cue") / med(1, "hubs_us_per_cue")
    rate = med(2, "cues_per_s") / med(1, "cues_per_s")
    print(f"  2 hubs / 1 hub: cues/s {rate:.2f}x; the busier hub's CPU {biggest:.2f}x of the "
          f"single hub's; all hubs' CPU per cue {every:.2f}x")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--cues", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
