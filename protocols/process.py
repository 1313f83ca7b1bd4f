"""What a long-running callboard process (hub, specialist) sets up once at start."""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

GC_GEN0_THRESHOLD = 20_000  # allocations between young collections (Python's default: 700)


def tune_gc() -> None:
    """Collect garbage less often, and never rescan what startup made.

    A hub or specialist keeps a large, long-lived heap (modules, runs, plans) and allocates
    in bursts (a batch of messages, a run of 5,000 cues starting); with the default
    threshold the collector runs every 700 allocations and its full collections rescan the
    whole heap: a new 5,000-cue run's first GO came 0.21-0.28 s after its start with the
    defaults, 0.10-0.11 s with this (bench/cues.py, part d). Reference counting still frees
    everything that is not in a cycle at once.
    """
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])


UVLOOP_ENV = "CALLBOARD_UVLOOP"  # "0" runs the standard asyncio loop though uvloop is installed
T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (`pip install uvloop`: not a dependency) and
    not turned off with CALLBOARD_UVLOOP=0; None (asyncio's own loop) otherwise."""
    if os.environ.get(UVLOOP_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name() -> str:
    """`uvloop` or `asyncio`: the loop `run` uses (uvicorn's `loop` setting takes these)."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on the loop `loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
