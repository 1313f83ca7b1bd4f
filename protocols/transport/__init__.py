"""Redis access: the only package that imports `redis`.

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

Parts: `_gateway` (Gateway: the private client, `_call` with the retry policy and the
error translation of `_errors`; Script), `_storage` (Storage: typed commands the state
stores of hub/store/ and specialists/markers.py are built from), `_base`, `_streams` and
`_upkeep` (Transport: streams), `_client` (connecting, the retry policy, Delivery).
"""

from __future__ import annotations

from redis.asyncio.client import Pipeline

from protocols.transport._client import Delivery, Redis, ack_commands, connect, retry_transient
from protocols.transport._gateway import Gateway, Script
from protocols.transport._probe import Probe
from protocols.transport._storage import Entry, Storage
from protocols.transport._streams import Transport
from protocols.transport._upkeep import Crowd
from protocols.transport._wire import Command, WriteAhead

__all__ = [
    "Command",
    "Crowd",
    "Delivery",
    "Entry",
    "Gateway",
    "Pipeline",
    "Probe",
    "Redis",
    "Script",
    "Storage",
    "Transport",
    "WriteAhead",
    "ack_commands",
    "connect",
    "retry_transient",
]
