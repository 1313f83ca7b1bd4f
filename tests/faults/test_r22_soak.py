"""Row 22 (soak): many runs with retention set short. Once they expire, Redis memory is back
within 10% of where it started, and no stream ever grows past its cap (plus what arrives
between two trims)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from hub.store.commit import COMMIT_ID_TTL_MS
from protocols.keys import Keys
from tests.e2e.procs import Procs, child_env, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import submit
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

WARMUP = 400  # runs that fill the capped streams (agent in/out, audit) before the start
# CI soaks 1,000 runs (about a minute); the 10,000 are run with
# CALLBOARD_SOAK_RUNS=10000 (figure in RELIABILITY.md's notes).
RUNS = int(os.environ.get("CALLBOARD_SOAK_RUNS", "1000"))
CONCURRENT = 20
RETENTION_S = 2
STREAM_MAXLEN = 200
# A trim every 0.2 s: what arrives between two trims grows with the machine's rate (about
# 800 entries in 0.5 s on a fast day, which passed the 5x-cap bound below on its own)
UPKEEP_S = 0.2
CONCURRENCY = 50  # the echo's
AGENT = "fx-soak"
CUELIST = {"cuelist": "soak", "cues": [{"id": "A", "target_agents": [AGENT]}]}
SETTLE_S = RETENTION_S + COMMIT_ID_TTL_MS / 1000 + 20


def _memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _longest_stream(client: redis.Redis, keys: Keys) -> tuple[int, str]:
    """The longest stream under the prefix: (entries, name without the prefix)."""
    found = client.scan_iter(match=f"{keys.prefix}*", count=1000, _type="stream")
    lengths = [(int(client.xlen(k)), k.decode()[len(keys.prefix) :]) for k in found]
    return max(lengths, default=(0, "-"))


def _settled(client: redis.Redis, keys: Keys) -> bool:
    """Every run expired and left the index; every commit id and done-marker gone."""
    left = [f"{keys.prefix}run:*", keys.commit("*"), f"{keys.prefix}done:*"]
    if any(next(iter(client.scan_iter(match=m, count=1000)), None) for m in left):
        return False
    return client.zcard(keys.all_runs) == 0 and client.scard(keys.active_runs()) == 0


def _finished(api: httpx.Client) -> dict[str, float]:
    """The hub's count of finished runs by status (/metrics)."""
    counts: dict[str, float] = {}
    for line in api.get("/metrics").text.splitlines():
        if line.startswith("callboard_runs_total{"):
            status = line.split('status="', 1)[1].split('"', 1)[0]
            counts[status] = float(line.rsplit(" ", 1)[1])
    return counts


async def _start_runs(url: str, n: int) -> None:
    gate = asyncio.Semaphore(CONCURRENT)
    async with httpx.AsyncClient(base_url=url, timeout=60) as api:

        async def one() -> None:
            async with gate:
                r = await api.post("/v1/runs", json={"cuelist": "soak"})
                assert r.status_code == 201, r.text

        await asyncio.gather(*(one() for _ in range(n)))


class Sampler(threading.Thread):
    """Every 0.1 s: Redis used_memory and the longest stream under the prefix (peaks)."""

    def __init__(self, url: str, keys: Keys) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url)
        self.keys = keys
        self.stop = threading.Event()
        self.peak = 0
        self.longest = (0, "-")

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.peak = max(self.peak, _memory(self.client))
            self.longest = max(self.longest, _longest_stream(self.client, self.keys))
        self.client.close()


def test_runs_expire_and_memory_returns_to_where_it_started(tmp_path: Path, figure: Figure) -> None:
    with EmbeddedServer() as server:
        env = child_env(
            server,
            CALLBOARD_RUN_RETENTION_S=str(RETENTION_S),
            CALLBOARD_DONE_TTL_S=str(RETENTION_S),
            CALLBOARD_UPKEEP_INTERVAL_S=str(UPKEEP_S),
            CALLBOARD_STREAM_MAXLEN=str(STREAM_MAXLEN),
            CALLBOARD_AUDIT_MAXLEN=str(STREAM_MAXLEN),
        )
        keys = Keys(env["CALLBOARD_PREFIX"])
        procs = Procs(env, tmp_path)
        client = redis.Redis.from_url(server.url)
        sampler = Sampler(server.url, keys)
        try:
            url = procs.hub()
            procs.echo(AGENT, CALLBOARD_CONCURRENCY=str(CONCURRENCY))
            with httpx.Client(base_url=url, timeout=30) as api:
                submit(api, CUELIST)
                wait_online(api, [AGENT])
                asyncio.run(_start_runs(url, WARMUP))
                eventually_sync(lambda: _finished(api).get("success", 0) >= WARMUP, 60)
                eventually_sync(lambda: _settled(client, keys), SETTLE_S, interval_s=0.2)
                start = _memory(client)
                sampler.start()
                asyncio.run(_start_runs(url, RUNS))
                eventually_sync(
                    lambda: sum(_finished(api).values()) >= WARMUP + RUNS,
                    120 + RUNS / 20,
                    interval_s=0.2,
                )
                finished = _finished(api)
                eventually_sync(lambda: _settled(client, keys), SETTLE_S, interval_s=0.2)
                end = _memory(client)
                settled_longest = _longest_stream(client, keys)
        finally:
            sampler.stop.set()
            if sampler.is_alive():
                sampler.join()
            procs.stop()
            client.close()
    success = int(finished.get("success", 0)) - WARMUP
    grew = (end - start) / start
    figure(
        row=22,
        fault=f"soak: {RUNS:,} runs ({CONCURRENT} at a time) with CALLBOARD_RUN_RETENTION_S="
        f"{RETENTION_S}, CALLBOARD_STREAM_MAXLEN={STREAM_MAXLEN}",
        promise="once the runs expire, Redis memory is back within 10% of its start; no "
        "stream grows past its cap once trimmed (under load: its cap, what is pending, and "
        "what came since the last trim)",
        measured=f"{success:,}/{RUNS:,} runs success; used_memory {start / 1024:.0f} KiB at "
        f"the start, {sampler.peak / 1024:.0f} KiB at the peak, {end / 1024:.0f} KiB once "
        f"expired ({grew:+.1%}); longest stream {sampler.longest[0]} entries "
        f"({sampler.longest[1]}; cap {STREAM_MAXLEN}, trimmed every {UPKEEP_S} s; pending "
        f"entries are never trimmed), {settled_longest[0]} once settled",
    )
    assert success == RUNS and set(finished) == {"success"}, finished
    assert end <= start * 1.10
    # under load a stream holds its cap, everything from the oldest entry its group still has
    # pending on, and what arrived since the last trim; untrimmed, the inbox would pass 3,000
    assert sampler.longest[0] <= 5 * STREAM_MAXLEN, sampler.longest
    assert settled_longest[0] <= STREAM_MAXLEN, settled_longest  # once trimmed, at its cap
