"""Message and run ids: UUIDv7 (time-ordered, unique, sortable), and RFC 3339 UTC times."""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime

from protocols.keys import partition_of

_last_ms = 0
_seq = 0
# Random bits from a generator seeded from the OS once per process (and again in a forked
# child): uniqueness rests on time and sequence plus 62 random bits, not on secrecy.
_rng = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _rng.seed(os.urandom(32)))


def new_id() -> str:
    """A UUIDv7 string; ids made in one process are strictly increasing."""
    global _last_ms, _seq
    ms = time.time_ns() // 1_000_000
    if ms <= _last_ms:
        ms = _last_ms
        _seq += 1
        if _seq > 0xFFF:  # 4,096 ids in one millisecond: borrow the next one
            ms += 1
            _seq = 0
    else:
        _seq = 0
    _last_ms = ms
    rand = _rng.getrandbits(62)
    value = (ms << 80) | (0x7 << 76) | (_seq << 64) | (0b10 << 62) | rand
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_id_in(partition: int, partitions: int) -> str:
    """A new id (as `new_id`) whose run lives in `partition` of `partitions` (a handful of
    tries: each id lands in a partition at random)."""
    while True:
        made = new_id()
        if partition_of(made, partitions) == partition:
            return made


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime | None) -> str | None:
    """RFC 3339 UTC with a Z, or None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
