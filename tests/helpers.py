"""Test helpers: wait for a condition with a deadline instead of sleeping."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_INTERVAL_S = 0.01


@overload
async def eventually(
    predicate: Callable[[], Awaitable[T]],
    timeout_s: float = ...,
    *,
    interval_s: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def eventually(
    predicate: Callable[[], T],
    timeout_s: float = ...,
    *,
    interval_s: float = ...,
    message: str = ...,
) -> T: ...


async def eventually(
    predicate: Callable[[], Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    message: str = "",
) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy; return that.

    Raises AssertionError naming the last value seen once `timeout_s` has passed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _not_met(timeout_s, message, value)
        await asyncio.sleep(interval_s)


def eventually_sync(
    predicate: Callable[[], T],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    message: str = "",
) -> T:
    """The blocking twin of `eventually`, for sync tests and threads."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _not_met(timeout_s, message, value)
        time.sleep(interval_s)


def _not_met(timeout_s: float, message: str, value: object) -> AssertionError:
    what = f": {message}" if message else ""
    return AssertionError(f"condition not met within {timeout_s}s{what} (last value: {value!r})")


async def run_out_of_memory(client: Any) -> Callable[[], Awaitable[None]]:
    """Make a server the suite started refuse writes out of memory (maxmemory below what
    it holds, noeviction: XADD is refused, XACK is not); returns what sets it back."""
    policy = (await client.config_get("maxmemory-policy"))["maxmemory-policy"]
    used = (await client.info("memory"))["used_memory"]
    await client.config_set("maxmemory-policy", "noeviction")
    await client.config_set("maxmemory", str(max(used // 2, 1024 * 1024)))

    async def restore() -> None:
        await client.config_set("maxmemory", "0")
        await client.config_set("maxmemory-policy", policy)

    return restore


def count_commits(store: Any, gate: asyncio.Event | None = None) -> list[float]:
    """The start time (monotonic) of each fenced write `store` (a StateStore) makes from now
    on; with `gate`, each write waits for it to be set before it goes out."""
    commits: list[float] = []
    real_commit = store.commit

    async def counted(*args: Any) -> None:
        commits.append(time.monotonic())
        if gate is not None:
            await gate.wait()
        await real_commit(*args)

    store.commit = counted
    return commits
