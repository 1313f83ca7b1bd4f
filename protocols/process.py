"""What a long-running callboard process (hub, specialist) sets up once at start."""

from __future__ import annotations

import gc

GC_GEN0_THRESHOLD = 20_000  # allocations between young collections (Python's default: 700)


def tune_gc() -> None:
    """Collect garbage less often, and never rescan what startup made.

    A hub or specialist keeps a large, long-lived heap (modules, runs, plans) and allocates
    in bursts (a batch of messages, a run of 5,000 cues starting); with the default
    threshold the collector runs every 700 allocations and a full collection rescans the
    whole heap, which cost a third of a big run's start. Reference counting still frees
    everything that is not in a cycle at once.
    """
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])
