"""What /healthz weighs beyond "Redis answers": how long no hub has led, whether Redis
takes writes, and how late the event loop runs (a ticker measures it)."""

from __future__ import annotations

import asyncio
import time
from collections import deque

TICK_S = 0.1
LAG_WINDOW_S = 5.0  # the worst lag of this last stretch is the one reported


class LoopLag:
    """A ticker that wakes every TICK_S and records how late it woke: a step, a request or
    a walk that holds the loop shows here, after the fact, for LAG_WINDOW_S."""

    def __init__(self) -> None:
        self._late: deque[tuple[float, float]] = deque()  # (when, seconds late)

    def worst_ms(self) -> float:
        """The worst lag (ms) seen in the last LAG_WINDOW_S, the tick under way included."""
        now = time.monotonic()
        while self._late and self._late[0][0] < now - LAG_WINDOW_S:
            self._late.popleft()
        return 1000 * max((late for _, late in self._late), default=0.0)

    def note(self, late_s: float) -> None:
        if late_s > TICK_S / 2:  # only what could matter: keeps the window short
            self._late.append((time.monotonic(), late_s))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            due = time.monotonic() + TICK_S
            await asyncio.sleep(TICK_S)
            self.note(time.monotonic() - due)


def reasons(
    *, leader_id: str | None, leaderless_s: float, lease_ms: int, write_refusal: str | None,
    lag_ms: float, max_lag_ms: float,
) -> list[str]:  # fmt: skip
    """Why the service is degraded (empty when it is not)."""
    out = []
    if leader_id is None and leaderless_s * 1000 > lease_ms:
        out.append(f"no hub has led for {leaderless_s:.1f} s (lease {lease_ms} ms)")
    if write_refusal:
        out.append(write_refusal)
    if lag_ms > max_lag_ms:
        out.append(f"the event loop lagged {lag_ms:.0f} ms (limit {max_lag_ms:.0f} ms)")
    return out
