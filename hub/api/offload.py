"""Work a request does in a worker thread when it is big, so the engine's loop is not held."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def off_the_loop_if(big: bool, work: Callable[[], T]) -> T:
    """`work()`, in a worker thread when `big`: building or checking something of 10,000
    cues takes a quarter of a second, which would hold the event loop (the engine's, and
    its lease renewals: fault row 21). Small work is done at once: a thread costs more."""
    if big:
        return await asyncio.to_thread(work)
    return work()
