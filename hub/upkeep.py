"""The leader's housekeeping: streams trimmed to their cap, expired runs dropped from the index.

Every `every_s` the leader trims each agent's in and out streams and the broadcast stream
to `CALLBOARD_STREAM_MAXLEN` entries, never past an entry any group still has pending or
has not been delivered (Transport.trim), and drops from the runs index the runs whose
state retention expired (`CALLBOARD_RUN_RETENTION_S`, applied by the commit as a TTL).
Only the leader does it, so two hubs never trim at once; a failure is logged and tried
again next round, never fatal to the term.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hub.store.state import StateStore
from protocols.errors import TransportError
from protocols.keys import Keys, group_partition
from protocols.transport import Transport

log = logging.getLogger(__name__)
FORGET_BATCH = 1_000  # index entries looked at per round


@dataclass(frozen=True)
class Sweep:
    """What one round did."""

    trimmed: int  # stream entries removed
    forgotten: int  # expired runs dropped from the index


class Upkeep:
    def __init__(
        self,
        transport: Transport,
        store: StateStore,
        keys: Keys,
        streams: Callable[[], Sequence[str]],
        *,
        stream_maxlen: int,
        retention_s: float | None,
        every_s: float = 10.0,
        partitions: int = 1,
    ) -> None:
        self.transport = transport
        self.store = store
        self.keys = keys
        self.streams = streams  # the agents' out streams the router knows
        self.stream_maxlen = stream_maxlen
        self.retention_s = retention_s
        self.every_s = every_s
        self.partitions = partitions  # hub groups of partitions past it are dropped
        # where the next round looks in the index's old entries: past those kept (runs still
        # there), so FORGET_BATCH of them cannot hide every expired one behind them forever
        self._forget_from = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sweep()
            except TransportError as exc:
                log.warning("upkeep: %s; trying again in %.0f s", exc, self.every_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.every_s)

    async def sweep(self) -> Sweep:
        await self._drop_stale_groups()
        trimmed = 0
        trimmed += await self.transport.trim(self.keys.broadcast, maxlen=self.stream_maxlen)
        for stream in self._agent_streams():
            trimmed += await self.transport.trim(
                stream, maxlen=self.stream_maxlen, grouped_only=True
            )
        forgotten = 0
        if self.retention_s is not None:
            cutoff = time.time() - self.retention_s
            gone, read = await self.store.expired_run_ids(cutoff, FORGET_BATCH, self._forget_from)
            forgotten = await self.store.forget_runs(gone)
            # the runs kept are passed over next time; at the end, back to the oldest
            self._forget_from = 0 if read < FORGET_BATCH else self._forget_from + read - len(gone)
        if trimmed or forgotten:
            log.info("upkeep: %d stream entries trimmed, %d expired runs forgotten",
                     trimmed, forgotten)  # fmt: skip
        return Sweep(trimmed, forgotten)

    async def _drop_stale_groups(self) -> None:
        """The hub groups of partitions that no longer exist (the count was lowered) are
        dropped: nobody reads them, and they would hold every out stream's trimming back."""
        for out in self.streams():
            for group in await self.transport.group_names(out):
                partition = group_partition(group)
                if partition is not None and partition >= self.partitions:
                    log.warning("upkeep: dropping group %s of %s (partition %d of %d)",
                                group, out, partition, self.partitions)  # fmt: skip
                    await self.transport.drop_group(out, group)

    def _agent_streams(self) -> list[str]:
        """Each agent's out and in streams."""
        capped: list[str] = []
        for out in self.streams():
            agent = self.keys.agent_of_out(out)
            if agent:
                capped += [out, self.keys.inbox(agent)]
        return capped
