"""Redis Streams transport: the only package that imports `redis` (split in four parts).

Publish (XADD, pipelined for batches), consume in consumer groups (XREADGROUP BLOCK),
XACK after handling, reclaim entries idle past `min_idle_ms` (XAUTOCLAIM) so a dead
replica's work moves to a live one, dead-letter poison entries after `max_deliveries`,
create groups idempotently, recover when Redis comes back empty (NOGROUP), reconnect
with backoff, and trim streams without ever dropping a pending entry. Redis errors are
translated to protocols.errors here and nowhere else.

Retries: every operation here is safe to repeat, so each one is retried on connection
loss (exponential backoff with jitter, at most `retry_s` in total) before it raises
TransportError. Repeating XADD can duplicate an entry whose reply was lost; that is the
accepted price of at-least-once delivery (handlers are idempotent). A repeated
XREADGROUP or XAUTOCLAIM whose reply was lost leaves its entries pending, so they come
back through `reclaim`.
"""

from __future__ import annotations

from protocols.transport._client import (
    Delivery,
    Redis,
    ack_commands,
    connect,
    is_group_missing,
    is_transient,
    retry_transient,
)
from protocols.transport._probe import Probe
from protocols.transport._streams import Transport

__all__ = [
    "Delivery",
    "Probe",
    "Redis",
    "Transport",
    "ack_commands",
    "connect",
    "is_group_missing",
    "is_transient",
    "retry_transient",
]
