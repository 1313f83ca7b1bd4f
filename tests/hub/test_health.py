"""What /healthz weighs: the degraded reasons and the loop-lag ticker."""

from __future__ import annotations

import asyncio
import time

from hub.health import LoopLag, reasons
from tests.helpers import eventually


def test_healthy_has_no_reason() -> None:
    ok = dict(leader_id="hub-a", leaderless_s=60.0, lease_ms=5000, write_refusal=None)
    assert reasons(**ok, lag_ms=10, max_lag_ms=1000) == []  # type: ignore[arg-type]


def test_each_reason_is_named() -> None:
    why = reasons(
        leader_id=None, leaderless_s=7.5, lease_ms=5000,
        write_refusal="Redis is out of memory (OOM)", lag_ms=2500, max_lag_ms=1000,
    )  # fmt: skip
    assert len(why) == 3
    assert "no hub has led for 7.5 s" in why[0] and "out of memory" in why[1]
    assert "lagged 2500 ms" in why[2]
    # no leader for less than a lease is an election, not an outage
    assert reasons(
        leader_id=None, leaderless_s=1.0, lease_ms=5000, write_refusal=None, lag_ms=0,
        max_lag_ms=1000,
    ) == []  # fmt: skip


async def test_the_ticker_sees_a_blocked_loop() -> None:
    lag = LoopLag()
    stop = asyncio.Event()
    task = asyncio.create_task(lag.run(stop))
    await asyncio.sleep(0)  # one yield: the ticker starts its first tick
    time.sleep(0.4)  # noqa: ASYNC251 -- the loop held on purpose, as a synchronous walk would
    await eventually(lambda: lag.worst_ms() >= 250, 2, message="the lag seen")
    stop.set()
    await task
