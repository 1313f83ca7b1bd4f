"""Row 17: Redis runs out of memory (maxmemory 64 KiB above what it holds, noeviction: the
runs clients keep starting fill it, so some writes pass and others fail) while runs are
under way. Clients are told 503 "out of memory",
/healthz is 503 degraded naming it; once memory is freed the hub recovers by itself and
every run a client was given an id for (201) finishes."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from tests.faults.conftest import Figure
from tests.faults.loss import health, mid_run, outcome, workload
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

RUNS = 4
OOM_S = 3.0


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(appendonly=True) as s:
        yield s


def test_out_of_memory_then_recovery(
    server: EmbeddedServer, tmp_path: Path, figure: Figure
) -> None:
    admin = redis.Redis.from_url(server.url)
    answers: Counter[str] = Counter()
    with workload(server, tmp_path) as w:
        w.start(RUNS)
        mid_run(w)
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", str(used + 64 * 1024))
        full = time.monotonic()
        try:
            degraded = eventually_sync(
                lambda: (h := health(w.url))[0] == 503 and h[1], 5, interval_s=0.1,
                message="/healthz degraded while Redis is full",
            )  # fmt: skip
            while time.monotonic() - full < OOM_S:  # clients keep asking for runs
                try:
                    r = w.api.post("/v1/runs", json={"cuelist": "no-loss"}, timeout=5)
                except httpx.HTTPError as exc:
                    answers[f"no answer ({type(exc).__name__})"] += 1
                    continue
                if r.status_code == 201:
                    w.run_ids.append(r.json()["run_id"])
                    answers["201"] += 1
                elif r.status_code == 503 and "out of memory" in r.json().get("detail", ""):
                    answers["503 out of memory"] += 1
                else:
                    answers[f"{r.status_code} {r.text[:80]}"] += 1
                time.sleep(0.01)  # pacing: one client asking ~100 times a second
        finally:
            admin.config_set("maxmemory", "0")
            admin.close()
        freed = time.monotonic()
        healthy = eventually_sync(
            lambda: health(w.url)[0] == 200, 20, interval_s=0.1, message="healthy again"
        )
        done = outcome(w, freed)
    status, took_s, lost, log, finished = done.figures()
    figure(
        row=17,
        fault=f"Redis out of memory (noeviction) for {OOM_S:g} s with {RUNS} runs under way "
        "and a client starting more",
        promise="503 saying out of memory; /healthz 503; after memory is freed every "
        "acknowledged run finishes",
        measured=f"answers while full {dict(answers)}; terms ended on a failed write: "
        f"{log.count('a state write failed')}; /healthz {degraded['status']}: "
        f"{degraded['reasons']}; {lost} completions lost; {finished}/{len(status)} "
        f"acknowledged runs success, the last {took_s:.1f} s after memory was freed",
    )
    assert healthy
    assert lost == 0
    assert finished == len(status), status
    assert answers["503 out of memory"] > 0 and set(answers) <= {"201", "503 out of memory"}
    assert any("out of memory" in r for r in degraded["reasons"]), degraded
    assert "Traceback" not in log or "OutOfMemory" not in log
