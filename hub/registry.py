"""The agent registry: contracts and replicas from `status.online`, liveness from Redis itself.

No heartbeats: a replica is alive while its consumer in the agent's group keeps reading
(XINFO CONSUMERS idle time), and gone after `status.offline` or a long silence.
"""

from __future__ import annotations

import time
from typing import Any

from hub.store.agents import AgentRecord, AgentStore, ReplicaRecord
from protocols import payloads as p
from protocols.codec import Envelope
from protocols.contracts import Contract
from protocols.errors import TransportError
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.targeting import Candidate
from protocols.transport import Transport

LIVENESS_MS = 15_000  # a replica blocked in XREADGROUP touches its consumer every block_ms
# An agent's record is written whole on every change: the replicas it lists are bounded,
# whatever names its messages make up (the least recently seen, offline first, make room).
REPLICAS_MAX = 256
NAME_CHARS = 64
# An agent may make up consumers on its own inbox without end (XREADGROUP with any name,
# XGROUP CREATECONSUMER): past this many, its group's list is not read (the hub's loop
# parsed 400,000 of them for 1.85 s) and its replicas' liveness is not known from Redis.
CONSUMERS_READ_MAX = 2 * REPLICAS_MAX


def _alive(consumer: dict[str, int]) -> bool:
    """From Redis 7.2 a blocked XREADGROUP resets `idle`, so idle time is liveness. Before
    that only reads that return entries do: then a replica is taken as alive unless it has
    work pending and has not touched it for the liveness window."""
    if consumer.get("idle_is_liveness"):
        return consumer["idle_ms"] < LIVENESS_MS
    return consumer["pending"] == 0 or consumer["idle_ms"] < LIVENESS_MS


class Registry:
    def __init__(self, transport: Transport, store: AgentStore, keys: Keys) -> None:
        self.transport = transport
        self.store = store
        self.keys = keys
        self.agents: dict[str, AgentRecord] = {}
        # each agent as targeting sees it, made once per contract it says (`online`)
        self._candidates: dict[str, Candidate] = {}

    async def load(self) -> None:
        self.agents = await self.store.load()
        self._candidates.clear()

    def contract_of(self, agent: str) -> Contract | None:
        entry = self.agents.get(agent)
        return Contract.model_validate(entry.contract) if entry else None

    def online(self) -> dict[str, Candidate]:
        """The agents with a replica that said `status.online` and not `status.offline`
        since, as targeting sees them (contract lists and labels): what a cue's `target`
        is resolved among. (A replica that died without saying so counts until it does.)
        Each agent's is made once for each `status.online` it sends, not once per call."""
        return _online(self.agents, self._candidates)

    async def online_stored(self) -> dict[str, Candidate]:
        """`online()` as Redis holds it (for the API, which does not own `self.agents`)."""
        return _online(await self.store.load())

    def apply(self, msg: Envelope) -> bool:
        """Update the registry from a status message; True when something changed."""
        now = time.time()
        agent = msg.from_agent
        entry = self.agents.get(agent)
        if entry is None:
            entry = self.agents[agent] = AgentRecord(agent=agent, first_seen=now)
        if msg.message_type is T.STATUS_ONLINE:
            online = msg.body(p.StatusOnline)
            entry.kind = online.kind[:NAME_CHARS]
            entry.contract = online.contract.model_dump(mode="json")
            self._candidates.pop(agent, None)
            _make_room(entry, online.replica)
            entry.replicas[online.replica[:NAME_CHARS]] = ReplicaRecord(
                online=True, since=now, concurrency=min(online.concurrency, 1 << 20),
                last_seen=now,
            )  # fmt: skip
            return True
        if msg.message_type is T.STATUS_OFFLINE:
            offline = msg.body(p.StatusOffline)
            _make_room(entry, offline.replica)
            replica = entry.replicas.setdefault(offline.replica[:NAME_CHARS], ReplicaRecord())
            replica.online, replica.last_seen = False, now
            replica.reason = offline.reason[: NAME_CHARS * 4]
            return True
        seen = entry.replicas.get(getattr(msg.payload, "replica", ""))
        if seen is not None:
            seen.last_seen = now
        return False

    async def save(self, agents: set[str]) -> None:
        if agents:
            await self.store.save(self.agents[a] for a in sorted(agents) if a in self.agents)

    async def describe(self) -> list[dict[str, Any]]:
        """Every agent with its replicas' liveness, read from the consumer group: how many
        consumers it has first, and their list only when there are at most
        CONSUMERS_READ_MAX (past that, `liveness_read` is False and a replica counts as
        online as long as it has not said otherwise)."""
        agents = await self.store.load()  # not self.agents: the router owns that copy
        names = sorted(agents)
        pairs = [(self.keys.inbox(a), a) for a in names]
        try:  # three round trips for every agent's group: how many (groups, then consumers),
            crowds = await self.transport.consumer_counts(pairs)  # then which
            counts = [c.consumers for c in crowds]
            readable = [pair for pair, n in zip(pairs, counts, strict=True)
                        if n is not None and n <= CONSUMERS_READ_MAX]  # fmt: skip
            read = dict(zip(readable, await self.transport.consumers_of(readable), strict=True))
        except TransportError:
            counts, read = [0] * len(names), {pair: {} for pair in pairs}
        out = []
        for agent, pair, count in zip(names, pairs, counts, strict=True):
            entry = agents[agent]
            consumers = read.get(pair)
            replicas = []
            for name, info in sorted(entry.replicas.items()):
                seen = (consumers or {}).get(name)
                idle = seen["idle_ms"] if seen else None
                if consumers is None:  # too many consumers to read: as it last said
                    alive = info.online
                else:
                    alive = info.online and seen is not None and _alive(seen)
                replicas.append({
                    "replica": name, "online": alive, "idle_ms": idle,
                    "pending": seen["pending"] if seen else 0,
                    "last_seen": info.last_seen,
                })  # fmt: skip
            out.append({
                "agent": agent, "kind": entry.kind, "contract": entry.contract,
                "replicas": replicas, "online": any(r["online"] for r in replicas),
                "last_seen": max((r.last_seen or 0 for r in entry.replicas.values()), default=None),
                "consumers": count, "liveness_read": consumers is not None,
            })  # fmt: skip
        return out


def _online(
    agents: dict[str, AgentRecord], made: dict[str, Candidate] | None = None
) -> dict[str, Candidate]:
    """The online agents as candidates; those in `made` are taken from it, and the others
    made are kept in it."""
    found: dict[str, Candidate] = {}
    for name, entry in sorted(agents.items()):
        if not any(r.online for r in entry.replicas.values()):
            continue
        candidate = None if made is None else made.get(name)
        if candidate is None:
            candidate = Candidate.of(name, entry.contract, entry.kind)
            if made is not None:
                made[name] = candidate
        found[name] = candidate
    return found


def _make_room(entry: AgentRecord, replica: str) -> None:
    """Forget the least recently seen replicas (offline ones first) past REPLICAS_MAX."""
    if replica[:NAME_CHARS] in entry.replicas or len(entry.replicas) < REPLICAS_MAX:
        return
    oldest = min(entry.replicas.items(), key=lambda kv: (kv[1].online, kv[1].last_seen or 0))
    del entry.replicas[oldest[0]]
