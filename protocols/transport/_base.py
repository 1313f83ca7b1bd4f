"""The Transport's construction: a Gateway with the stream settings of one process."""

from __future__ import annotations

from typing import Any, Self

from protocols.keys import Keys
from protocols.settings import DEADLETTER_MAXLEN, DEADLETTER_RAW_BYTES
from protocols.transport._client import (
    DEFAULT_RETRY_S,
    OnStateLost,
    Redis,
    connect,
    socket_timeout_of,
)
from protocols.transport._gateway import Gateway
from protocols.transport._slots import InFlightReads


class _TransportBase(Gateway):
    """Streams I/O for one process. Safe to share between asyncio tasks."""

    def __init__(
        self,
        client: Redis,
        keys: Keys,
        *,
        max_message_bytes: int = 256 * 1024,
        max_deliveries: int = 5,
        on_state_lost: OnStateLost | None = None,
        retry_s: float = DEFAULT_RETRY_S,
        deadletter_raw_bytes: int = DEADLETTER_RAW_BYTES,
        deadletter_maxlen: int = DEADLETTER_MAXLEN,
    ) -> None:
        super().__init__(client, retry_s=retry_s)
        self.keys = keys
        self.max_message_bytes = max_message_bytes
        self.max_deliveries = max_deliveries
        # A dead letter keeps this much of the entry (with its size and SHA-256), and the
        # dead-letter stream about this many letters: neither grows with what is sent.
        self.deadletter_raw_bytes = deadletter_raw_bytes
        self.deadletter_maxlen = deadletter_maxlen
        self.on_state_lost = on_state_lost
        self.groups_recreated = 0  # consumer groups found missing and made again (NOGROUP)
        self._in_flight = InFlightReads()  # a cluster's blocking reads, one per slot
        # the reads the last `read_group` given `sent` returned: (their `sent`, streams)
        self.answered: list[tuple[float, tuple[str, ...]]] = []

    def abandon_reads(self) -> None:
        """Cancel a cluster's blocking reads still in flight (a reader that stops, e.g. the
        router when its term ends): what they took stays pending, for a reclaim."""
        self._in_flight.abandon()

    async def close(self) -> None:
        await self._in_flight.close()
        await super().close()

    @classmethod
    def from_url(cls, url: str, keys: Keys, **options: Any) -> Self:
        names = (
            "max_message_bytes", "max_deliveries", "on_state_lost", "retry_s",
            "deadletter_raw_bytes", "deadletter_maxlen",
        )  # fmt: skip
        own = {name: options.pop(name) for name in names if name in options}
        transport = cls(connect(url, **options), keys, **own)
        transport._owns_client = True
        return transport

    def _block(self, block_ms: int | None) -> int | None:
        """`block_ms`, kept under the client's read timeout if it has one (0 is forever)."""
        timeout_s = socket_timeout_of(self._client)
        if block_ms is None or timeout_s is None:
            return block_ms
        limit_ms = max(1, int(timeout_s * 1000) - 500)
        return limit_ms if block_ms == 0 else min(block_ms, limit_ms)
