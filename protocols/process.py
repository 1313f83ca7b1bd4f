"""What a long-running callboard process (hub, specialist) sets up once at start."""

from __future__ import annotations

import gc

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
