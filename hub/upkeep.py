"""The leader's housekeeping: streams trimmed, made-up consumers dropped, expired runs and
their escalations forgotten.

Every `every_s` the leader trims each agent's out stream to what the hub has not yet read
and acknowledged, or did in the last HANDLED_KEPT_S (nothing reads an acknowledged out
entry again: Transport.trim_handled), and to `CALLBOARD_STREAM_MAXLEN` entries,
each inbox and the broadcast stream to `CALLBOARD_STREAM_MAXLEN` entries, never past an
entry any group still has pending or has not been delivered (Transport.trim), and drops
from the runs index the runs whose state retention expired (`CALLBOARD_RUN_RETENTION_S`,
applied by the commit as a TTL), and the escalations of runs so expired, or of no run and
closed as long ago. An inbox keeps what its agent acknowledged, up to the cap:
a `status.rejected` names an entry its replica acknowledged with it, and the hub copies
that entry when it reads the rejection, maybe long after; only the agent's own group holds
its trimming back. Consumers an agent's group holds beyond its replicas (an agent can make
up any number on its own inbox) are dropped, at most CONSUMERS_DROPPED_MAX a round, once
idle and holding nothing, and so are groups it made up there, GROUPS_DROPPED_MAX a round,
and the consumers of hubs replaced (idle an hour, holding nothing).
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

from hub.store.agents import AgentStore
from hub.store.commands import GROUP as COMMANDS_GROUP
from hub.store.state import StateStore
from protocols.errors import OutOfMemory, TransportError, Unreachable
from protocols.keys import Keys, group_partition, hub_group
from protocols.transport import Crowd, Transport

log = logging.getLogger(__name__)
FORGET_BATCH = 1_000  # index entries looked at per round
# An out stream keeps what the hub handled this long, for whoever reads it (an operator's
# redis-cli, a test measuring what an agent sent): bounded by what an agent sends meanwhile
HANDLED_KEPT_S = 120.0
CONSUMERS_DROPPED_MAX = 50_000  # made-up consumers dropped per round (of all agents)
GROUPS_DROPPED_MAX = 50_000  # made-up groups dropped per round (of all agents)
CONSUMER_IDLE_MS = 60_000  # ...once idle this long (a replica lists itself before it says so)
# A hub's consumer on the out streams and the commands stream, holding nothing and idle this
# long, is of a hub replaced (the default hub id is host and pid: each restart makes new ones)
HUB_CONSUMER_IDLE_MS = 3_600_000


@dataclass(frozen=True)
class Sweep:
    """What one round did."""

    trimmed: int  # stream entries removed
    forgotten: int  # expired runs dropped from the index
    consumers: int = 0  # consumers no replica of the registry's dropped
    escalations: int = 0  # escalations of runs gone, or closed long ago, forgotten
    groups: int = 0  # groups agents made up on their inboxes dropped


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
        consumer: str = "",
        command_streams: Sequence[str] = (),
    ) -> None:
        self.transport = transport
        self.store = store
        self.agents = AgentStore(store.db, keys)  # the replicas the registry knows
        self.keys = keys
        self.streams = streams  # the agents' out streams the router knows
        self.stream_maxlen = stream_maxlen
        self.retention_s = retention_s
        self.every_s = every_s
        self.partitions = partitions  # hub groups of partitions past it are dropped
        self.consumer = consumer  # this hub's name in the hubs' groups (never dropped)
        self.command_streams = list(command_streams)  # each partition's commands stream
        # where the next round looks in the index's old entries: past those kept (runs still
        # there), so FORGET_BATCH of them cannot hide every expired one behind them forever
        self._forget_from = 0
        self._forget_escs_from = 0

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
        refused: list[str] = []
        inboxes = [(inbox, agent) for agent, _, inbox in self._agent_streams()]
        crowds = await self.transport.consumer_counts(inboxes)  # for both drops below
        groups = await self._drop_made_up_groups(inboxes, crowds)
        for agent, out, inbox in self._agent_streams():
            try:
                # only once every partition's group reads it: one not made yet starts at "0"
                trimmed += await self.transport.trim_handled(
                    out, groups=self.partitions, keep_ms=int(HANDLED_KEPT_S * 1000)
                )
                # and the count cap, over what was handled lately too
                trimmed += await self.transport.trim(out, maxlen=self.stream_maxlen,
                                                     grouped_only=True)  # fmt: skip
                trimmed += await self.transport.trim(inbox, maxlen=self.stream_maxlen,
                                                     grouped_only=True, group=agent)  # fmt: skip
            except (Unreachable, OutOfMemory):  # Redis itself: the round ends
                raise
            except TransportError as exc:  # this agent's streams (what it wrote): the others go on
                refused.append(f"{out}: {exc}")
        if refused:
            log.warning("upkeep: %d agents' streams not trimmed, e.g. %s", len(refused),
                        refused[0])  # fmt: skip
        consumers = await self._drop_made_up_consumers(inboxes, crowds)
        consumers += await self._drop_hubs_gone()
        forgotten = forgotten_escs = 0
        if self.retention_s is not None:
            cutoff = time.time() - self.retention_s
            gone, read = await self.store.expired_run_ids(cutoff, FORGET_BATCH, self._forget_from)
            forgotten = await self.store.forget_runs(gone)
            # the runs kept are passed over next time; at the end, back to the oldest
            self._forget_from = _past_kept(self._forget_from, read, len(gone))
            # escalations: of runs gone, or of no run and closed, as long ago (and the same
            # way past those kept)
            gone, read = await self.store.expired_escalation_ids(
                cutoff, FORGET_BATCH, self._forget_escs_from
            )
            forgotten_escs = await self.store.forget_escalations(gone)
            self._forget_escs_from = _past_kept(self._forget_escs_from, read, len(gone))
        if trimmed or forgotten or consumers or forgotten_escs or groups:
            log.info("upkeep: %d stream entries trimmed, %d expired runs and %d escalations "
                     "forgotten, %d made-up consumers and %d groups dropped", trimmed,
                     forgotten, forgotten_escs, consumers, groups)  # fmt: skip
        return Sweep(trimmed, forgotten, consumers, forgotten_escs, groups)

    async def _drop_made_up_consumers(
        self, pairs: Sequence[tuple[str, str]], crowds: Sequence[Crowd]
    ) -> int:
        """Drop consumers of the agents' groups (each (inbox, agent) of `pairs`, as
        `crowds` counted them) that are none of the replicas the registry knows, hold
        nothing and have been idle CONSUMER_IDLE_MS: CONSUMERS_DROPPED_MAX a round at most.
        Only a group with more consumers than its agent has replicas, or not counted, is
        listed (off the event loop: see Transport.idle_consumers)."""
        crowded = [(pair, c.consumers) for pair, c in zip(pairs, crowds, strict=True)
                   if c.consumers != 0]  # fmt: skip
        if not crowded:
            return 0
        records = await self.agents.load()
        dropped = 0
        for (inbox, agent), count in crowded:
            known = records[agent].replicas if agent in records else {}
            room = CONSUMERS_DROPPED_MAX - dropped
            if (count is not None and count <= len(known)) or room <= 0:
                continue
            try:
                names = await self.transport.idle_consumers(
                    inbox, agent, keep=set(known), min_idle_ms=CONSUMER_IDLE_MS, most=room
                )
                gone = await self.transport.drop_consumers(inbox, agent, names) if names else 0
            except (Unreachable, OutOfMemory):
                raise
            except TransportError as exc:  # this agent's inbox: the others go on
                log.warning("upkeep: consumers of %s not looked at: %s", agent, exc)
                continue
            if gone:  # (one that read an entry since it was listed is kept)
                log.warning("upkeep: dropped %d consumers of %s no replica of it has "
                            "(made up on its own inbox)", gone, agent)  # fmt: skip
                dropped += gone
        return dropped

    async def _drop_hubs_gone(self) -> int:
        """Drop the consumers of the hubs' groups (each partition's on every out stream, and
        on its commands stream) that hold nothing and have been idle HUB_CONSUMER_IDLE_MS:
        hubs replaced. No agent may make groups or consumers there, so their lists are
        short and read here: one XINFO GROUPS a stream, then XINFO CONSUMERS of the groups
        with more than one consumer. This hub's own is kept. One dropped by mistake loses
        nothing (the script checks it holds nothing): a read makes it again."""
        streams = [*self.streams(), *self.command_streams]
        ours = {hub_group(p) for p in range(self.partitions)} | {COMMANDS_GROUP}
        counted = await self.transport.group_consumers(streams)
        crowded = [(stream, group) for stream, groups in zip(streams, counted, strict=True)
                   for group, n in groups.items() if group in ours and n > 1]  # fmt: skip
        dropped = 0
        for (stream, group), consumers in zip(
            crowded, await self.transport.consumers_of(crowded), strict=True
        ):
            names = [name for name, seen in consumers.items()
                     if name != self.consumer and not seen["pending"]
                     and seen["idle_ms"] >= HUB_CONSUMER_IDLE_MS]  # fmt: skip
            names = names[: CONSUMERS_DROPPED_MAX - dropped]
            if not names:
                continue
            try:
                dropped += await self.transport.drop_consumers(stream, group, names)
            except (Unreachable, OutOfMemory):
                raise
            except TransportError as exc:  # this stream: the others go on
                log.warning("upkeep: consumers of %s not dropped: %s", stream, exc)
        return dropped

    async def _drop_made_up_groups(
        self, pairs: Sequence[tuple[str, str]], crowds: Sequence[Crowd]
    ) -> int:
        """Drop the consumer groups an agent made up on its own inbox (any group but the one
        named after it), GROUPS_DROPPED_MAX a round at most: nothing the hub or a replica
        reads, and their list may be long (listed off the event loop on one server, on it on
        a cluster: Transport.foreign_groups). Until they are dropped the inbox is not
        trimmed (its groups are not listed past GROUPS_READ_MAX). `pairs`: (inbox, agent),
        as `crowds` counted them."""
        dropped = 0
        for (inbox, agent), crowd in zip(pairs, crowds, strict=True):
            room = GROUPS_DROPPED_MAX - dropped
            if crowd.groups <= 1 or room <= 0:
                continue
            try:
                names = await self.transport.foreign_groups(inbox, agent, most=room)
                gone = await self.transport.drop_groups(inbox, names) if names else 0
            except (Unreachable, OutOfMemory):
                raise
            except TransportError as exc:  # this agent's inbox: the others go on
                log.warning("upkeep: groups of %s not looked at: %s", inbox, exc)
                continue
            if gone:
                log.warning("upkeep: dropped %d consumer groups %s made up on its inbox",
                            gone, agent)  # fmt: skip
                dropped += gone
        return dropped

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

    def _agent_streams(self) -> list[tuple[str, str, str]]:
        """Each agent with its out and in streams."""
        return [
            (agent, out, self.keys.inbox(agent))
            for out in self.streams()
            if (agent := self.keys.agent_of_out(out))
        ]


def _past_kept(offset: int, read: int, gone: int) -> int:
    """Where the next round looks in an index's old entries: past the `read - gone` kept
    this round; back to the oldest once a round read fewer than FORGET_BATCH (the end)."""
    return 0 if read < FORGET_BATCH else offset + read - gone
