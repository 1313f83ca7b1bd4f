"""Row 15: the hub's state writes fail for a few seconds while runs are under way, twice:
first only the commit is refused (the server's ACL denies EVALSHA: every read, the lease
and the agents go on), then every write is (the server made a read-only replica of
nobody: READONLY), each for FAULT_S. No acknowledged message is lost: every run finishes,
and /healthz says degraded while writes are refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from callboard.embedded import EmbeddedServer, free_port
from tests.faults.conftest import Figure
from tests.faults.loss import health, mid_run, outcome, workload
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

RUNS = 4  # started before each of the two faults
FAULT_S = 3.0


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(appendonly=True) as s:
        yield s


def _hold(seconds: float) -> None:
    began = time.monotonic()
    eventually_sync(lambda: time.monotonic() - began >= seconds, seconds + 1, interval_s=0.05)


def test_commit_failing_for_seconds_loses_nothing(
    server: EmbeddedServer, tmp_path: Path, figure: Figure
) -> None:
    admin = redis.Redis.from_url(server.url)
    with workload(server, tmp_path) as w:
        w.start(RUNS)
        mid_run(w)
        admin.execute_command("ACL", "SETUSER", "default", "-evalsha", "-eval")
        try:
            _hold(FAULT_S)
        finally:
            admin.execute_command("ACL", "SETUSER", "default", "+@all")
        w.start(RUNS)
        mid_run(w)
        admin.replicaof("127.0.0.1", free_port())  # nobody there: read-only, data kept
        try:
            degraded = eventually_sync(
                lambda: (h := health(w.url))[0] == 503 and h[1], 5, interval_s=0.1,
                message="/healthz degraded while writes are refused",
            )  # fmt: skip
            _hold(FAULT_S)
        finally:
            admin.replicaof("no", "one")
            admin.close()
        healed = time.monotonic()
        done = outcome(w, healed)
    status, took_s, lost, log, finished = done.figures()
    figure(
        row=15,
        fault=f"the commit refused (ACL: no EVALSHA) for {FAULT_S:g} s, then every write "
        f"(READONLY) for {FAULT_S:g} s, {RUNS} runs under way each time",
        promise="0 acknowledged messages lost; every run finishes",
        measured=f"{lost} acknowledged completions lost; {finished}/{len(status)} runs "
        f"success, the last {took_s:.1f} s after writes came back; terms ended on a failed "
        f"write: {log.count('a state write failed')}; /healthz said {degraded['reasons']}",
    )
    assert lost == 0
    assert finished == len(status), status
    assert "a state write failed" in log  # the first fault did fail commits
    assert any("READONLY" in r for r in degraded["reasons"]), degraded
