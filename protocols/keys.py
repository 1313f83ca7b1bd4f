"""Every Redis key callboard uses, spelled once, under a configurable prefix; the agent id rule.

Braces in the keys are literal Redis Cluster hash tags: only the part between `{` and `}`
picks the slot, so keys that must be touched together share it.

- Agent-tagged: `{p}out:{AGENT}`, `{p}in:{AGENT}`, `{p}done:{AGENT}:TOKEN`. A specialist's
  atomic write (XADD out + XACK in + SET done-marker in one MULTI) stays in one slot.
- Run-tagged: `{p}run:{RUN}` (header, order, one field per cue), `{p}run:{RUN}:events`,
  `{p}run:{RUN}:context`. A run's state lives together, on any node.
- Partition-tagged: `{p}hub:{pN}:leader`, `:fence`, `:commands`, `:commit:ID`, `:active`,
  `:journal`, `:resources` (N > 0), `:served:ID`. The engine's fenced state of partition N
  stays together (N=0 with one partition). A run's partition is `partition_of(run_id, count)`.
- Slot-tagged (Redis Cluster only): `{p}hub:{TAG}:fence:pN`, `{p}hub:{TAG}:applied:ID`, where
  TAG is a short string hashing to one given slot (`slot_tag`): what the journaled commit
  keeps per slot it applies to (see hub/store/journal.py).
- Global streams `{p}broadcast`, `{p}dead`, `{p}audit`, and untagged hub keys.
"""

from __future__ import annotations

import re
from binascii import crc32, crc_hqx
from dataclasses import dataclass
from functools import cache

DEFAULT_PREFIX = "cb:"
HUB_GROUP = "hub"  # the consumer group partition 0's leader reads `out` streams in
RESOURCE_PARTITION = 0  # the partition every run that claims a resource is placed in
STREAM_FIELD = "m"  # the one stream field that holds an encoded envelope

# Agent and replica ids: no `*`, `:`, `{`, `}`, `?` or spaces, so ACL key patterns are
# exact and an agent id is always a whole hash tag.
AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
_AGENT_ID = re.compile(AGENT_ID_PATTERN)


def is_agent_id(name: str) -> bool:
    return bool(_AGENT_ID.fullmatch(name))  # fullmatch: `$` alone lets a final newline in


# A stream entry id as Redis writes it (`<ms>-<seq>`): what a dead letter, a rejected entry
# or a page boundary may name; anything else is never looked up.
ENTRY_ID_PATTERN = r"^[0-9]{1,20}-[0-9]{1,20}$"
# An entry id as the API takes one (a run's event, a dead letter: ids Redis handed the hub,
# milliseconds and a count): each part at most 19 digits, so the pattern alone says it fits
# 64 bits and a request it lets through is never refused for its size.
ENTRY_ID_PARAM = r"^[0-9]{1,19}-[0-9]{1,19}$"
_ENTRY_ID = re.compile(ENTRY_ID_PATTERN)


def is_entry_id(text: str) -> bool:
    """`<ms>-<seq>`, each part a 64-bit unsigned number (what Redis accepts)."""
    if not _ENTRY_ID.fullmatch(text):
        return False
    ms, seq = text.split("-")
    return int(ms) < 1 << 64 and int(seq) < 1 << 64


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id as what orders it: (milliseconds, sequence)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def hub_group(partition: int = 0) -> str:
    """The consumer group a partition's leader reads every `out` stream in (`hub` for
    partition 0: one partition reads as the engine always did)."""
    return HUB_GROUP if partition == 0 else f"{HUB_GROUP}-p{partition}"


def group_partition(group: str) -> int | None:
    """The partition whose leader reads in `group` (`hub_group`'s inverse); None when it
    is no hub group."""
    if group == HUB_GROUP:
        return 0
    head = f"{HUB_GROUP}-p"
    number = group[len(head) :] if group.startswith(head) else ""
    return int(number) if number.isdigit() and number == str(int(number)) else None


def partition_of(run_id: str, partitions: int) -> int:
    """The engine partition a run lives in: CRC-32 of its id, modulo the partition count
    (every hub and API process must agree, so the count is fixed per prefix: see
    `Keys.partitions`)."""
    return 0 if partitions <= 1 else crc32(run_id.encode()) % partitions


SLOTS = 16384  # Redis Cluster hash slots


def key_slot(key: str | bytes) -> int:
    """The Redis Cluster slot of `key`: CRC16 of its hash tag (the text between the first
    `{` and the next `}`, when not empty), else of the whole key."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return crc_hqx(raw, 0) % SLOTS


@cache
def _slot_tags() -> tuple[str, ...]:
    """For each slot, the shortest decimal string hashing to it (found once, ~0.1 s)."""
    tags: list[str | None] = [None] * SLOTS
    missing, n = SLOTS, 0
    while missing:
        slot = crc_hqx(str(n).encode(), 0) % SLOTS
        if tags[slot] is None:
            tags[slot] = str(n)
            missing -= 1
        n += 1
    return tuple(t for t in tags if t is not None)


def slot_tag(slot: int) -> str:
    """A hash tag whose keys land in `slot`."""
    return _slot_tags()[slot]


def _tag(name: str) -> str:
    """`{name}`: a Redis Cluster hash tag (the slot is chosen by `name` alone)."""
    return "{" + name + "}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Every key callboard uses, built from one prefix; each one a named method."""

    prefix: str = DEFAULT_PREFIX

    # -- agent-tagged: one agent's streams and done-markers share a slot -----------------
    def out(self, agent: str) -> str:
        """Written only by `agent`; the key authenticates the sender."""
        return f"{self.prefix}out:{_tag(agent)}"

    def inbox(self, agent: str) -> str:
        """Written by the hub, read by the agent's replicas in group `agent`."""
        return f"{self.prefix}in:{_tag(agent)}"

    def done(self, agent: str, token: str) -> str:
        """A done-marker of `agent` for non-idempotent work."""
        return f"{self.prefix}done:{_tag(agent)}:{token}"

    @property
    def out_pattern(self) -> str:
        """SCAN MATCH pattern for every agent's out stream."""
        return self.out("*")

    def agent_of_out(self, key: str) -> str | None:
        """The agent an `out` stream belongs to, or None when `key` is not one."""
        return self._agent_in(key, f"{self.prefix}out:")

    def agent_of_inbox(self, key: str) -> str | None:
        """The agent an `in` stream belongs to, or None when `key` is not one."""
        return self._agent_in(key, f"{self.prefix}in:")

    @staticmethod
    def _agent_in(key: str, head: str) -> str | None:
        if not (key.startswith(head + "{") and key.endswith("}")):
            return None
        agent = key[len(head) + 1 : -1]
        return agent if is_agent_id(agent) else None

    # -- global streams -------------------------------------------------------------------
    @property
    def broadcast(self) -> str:
        return f"{self.prefix}broadcast"

    @property
    def dead(self) -> str:
        return f"{self.prefix}dead"

    @property
    def audit(self) -> str:
        return f"{self.prefix}audit"

    # -- partition-tagged: the engine's fenced state --------------------------------------
    def _hub(self, partition: int, name: str) -> str:
        return f"{self.prefix}hub:{_tag(f'p{partition}')}:{name}"

    def leader(self, partition: int = 0) -> str:
        """The leader lease: `hub_id:fencing_token`, with a TTL."""
        return self._hub(partition, "leader")

    def fence(self, partition: int = 0) -> str:
        """The fencing counter: every attempt to lead takes the next token."""
        return self._hub(partition, "fence")

    def commands(self, partition: int = 0) -> str:
        """Operator commands for the engine's leader (a stream, consumer group `engine`)."""
        return self._hub(partition, "commands")

    def commit(self, commit_id: str, partition: int = 0) -> str:
        """Marks a fenced commit as applied, so a retried one is not applied twice."""
        return self._hub(partition, f"commit:{commit_id}")

    def served(self, command_id: str, partition: int = 0) -> str:
        """The answer to an operator command whose effect is written, filed by the step
        that wrote it: the command, served again, is answered from it (hub.commands.server)."""
        return self._hub(partition, f"served:{command_id}")

    def active_runs(self, partition: int = 0) -> str:
        """The ids of the partition's runs that are not finished (a set)."""
        return self._hub(partition, "active")

    def resources(self, partition: int = 0) -> str:
        """The resource book of the partition's engine (leases held and waiting); only
        partition RESOURCE_PARTITION's holds any. Partition 0 keeps the untagged key."""
        if partition == 0:
            return f"{self.prefix}resources"
        return self._hub(partition, "resources")

    @property
    def partitions(self) -> str:
        """The engine's partition count, set by the first hub: a hub started with another
        count refuses to start (runs would be looked for in the wrong partition)."""
        return f"{self.prefix}hub:partitions"

    @property
    def hubs(self) -> str:
        """The hubs alive, scored by when each last said so (ms): how the partitions are
        shared out (a sorted set)."""
        return f"{self.prefix}hub:members"

    def journal(self, partition: int = 0) -> str:
        """On a Redis Cluster: the fenced steps written but not yet applied everywhere
        (a stream: one entry per step, in commit order)."""
        return self._hub(partition, "journal")

    # -- slot-tagged (Redis Cluster): what the journaled commit keeps per slot -----------
    def slot_fence(self, slot: int, partition: int = 0) -> str:
        """The highest fencing token of partition N that applied a step in `slot`."""
        return f"{self.prefix}hub:{_tag(slot_tag(slot))}:fence:p{partition}"

    def applied(self, slot: int, commit_id: str) -> str:
        """Marks a journaled step as applied in `slot` (so a replay applies it once)."""
        return f"{self.prefix}hub:{_tag(slot_tag(slot))}:applied:{commit_id}"

    # -- run-tagged: a run's state, events and context share a slot ----------------------
    def run(self, run_id: str) -> str:
        """A run's hash: its header, its cue order, one field per cue."""
        return f"{self.prefix}run:{_tag(run_id)}"

    def run_events(self, run_id: str) -> str:
        return f"{self.run(run_id)}:events"

    def run_context(self, run_id: str) -> str:
        return f"{self.run(run_id)}:context"

    # -- other hub keys -------------------------------------------------------------------
    @property
    def all_runs(self) -> str:
        """Every run id, scored by creation time (a sorted set)."""
        return f"{self.prefix}runs:all"

    def escalation(self, esc_id: str) -> str:
        return f"{self.prefix}esc:{esc_id}"

    @property
    def escalations(self) -> str:
        """Escalation ids scored by creation time (a sorted set)."""
        return f"{self.prefix}escs"

    @property
    def open_escalations(self) -> str:
        """The ids of the open escalations of no run (a set): each holds its dedup slot
        for a new leader however many newer ones there are (a run's are named in its hash)."""
        return f"{self.prefix}escs:open"

    @property
    def agents(self) -> str:
        """The registry: one field per agent (contract, replicas)."""
        return f"{self.prefix}agents"

    @property
    def cuelists(self) -> str:
        """Cuelist names (a sorted set)."""
        return f"{self.prefix}cuelists"

    def cuelist(self, name: str) -> str:
        """A cuelist's stored versions (a hash: version -> document)."""
        return f"{self.prefix}cuelist:{_tag(name)}"

    def cuelist_versions(self, name: str) -> str:
        """A cuelist's versions scored by when they were stored (a sorted set)."""
        return f"{self.cuelist(name)}:versions"

    @property
    def deleted_versions(self) -> str:
        """Deleted cuelist versions kept readable for the runs still pinned to them, as
        `NAME VERSION` scored by when they were deleted (a sorted set)."""
        return f"{self.prefix}cuelists:deleted"

    def idempotency(self, key: str) -> str:
        """What a run start's `Idempotency-Key` stands for (hub.store.idempotency)."""
        return f"{self.prefix}idem:{key}"

    def command_idempotency(self, key: str, partition: int = 0) -> str:
        """What an operator command's `Idempotency-Key` stands for, as one partition served
        it (a pause reaches every partition: each keeps its own)."""
        where = f"@{partition}" if partition else ""
        return f"{self.prefix}idemop{where}:{key}"

    def schedule(self, name: str) -> str:
        return f"{self.prefix}schedule:{name}"

    def reply(self, command_id: str) -> str:
        """The answer to one operator command (a list the asking hub blocks on)."""
        return f"{self.prefix}hub:reply:{command_id}"

    def answers(self, asker: str) -> str:
        """The answers to one asking process's commands (a stream it reads in one task)."""
        return f"{self.prefix}hub:answers:{asker}"

    @property
    def paused(self) -> str:
        """Why GOs are paused (a critical escalation), when they are."""
        return f"{self.prefix}paused"
