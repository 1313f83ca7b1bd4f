"""Row 16: Redis goes away for longer than the commit's retry window (stopped, restarted
from its AOF COMMIT_RETRY_S + 2 s later) while runs are under way. No acknowledged message
is lost: the hub leads again by itself, and every run finishes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from callboard.embedded import EmbeddedServer
from hub.store.commit import COMMIT_RETRY_S
from tests.faults.conftest import Figure
from tests.faults.loss import mid_run, outcome, workload
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

RUNS = 6
OUTAGE_S = COMMIT_RETRY_S + 2


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(appendonly=True) as s:
        yield s


def test_redis_outage_past_the_retry_window_loses_nothing(
    server: EmbeddedServer, tmp_path: Path, figure: Figure
) -> None:
    with workload(server, tmp_path) as w:
        w.start(RUNS)
        mid_run(w)
        server.stop()  # SIGTERM: the AOF (everysec) is flushed on a clean shutdown
        down = time.monotonic()
        eventually_sync(lambda: time.monotonic() - down >= OUTAGE_S, OUTAGE_S + 1, interval_s=0.1)
        server.start()
        back = time.monotonic()
        done = outcome(w, back)
    status, took_s, lost, log, finished = done.figures()
    figure(
        row=16,
        fault=f"Redis down {OUTAGE_S:g} s (past the {COMMIT_RETRY_S:g} s commit retry "
        f"window), restarted from its AOF, {RUNS} runs under way",
        promise="0 acknowledged messages lost; every run finishes",
        measured=f"{lost} acknowledged completions lost; {finished}/{RUNS} runs success, the "
        f"last {took_s:.1f} s after Redis came back; terms ended on a failed write: "
        f"{log.count('a state write failed')}",
    )
    assert lost == 0
    assert finished == RUNS, status
