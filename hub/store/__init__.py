"""The hub's storage gateway: every Redis read and write of the hub, typed, in one package.

Each store returns models, never raw replies, and is built on one Storage (the typed
commands of protocols.transport, whose Gateway translates every Redis error into
protocols.errors once). No other hub module touches Redis except through the Transport.

    state.StateStore      runs, events, context, escalations, resources; the fenced commit
    commit.FencedCommit   the commit script (every key in KEYS) and the ops of a step
    journal               on a Redis Cluster, the commit journaled, then applied by slot
    ops                   a step's operations: flat for the scripts, packed, by slot
    layout                how a run lies in its hash (header, order, one field per cue)
    cuelists.CuelistStore cuelist versions by content hash
    agents.AgentStore     the registry's records
    commands.CommandStore operator commands for the leader, and their answers
    idempotency           Idempotency-Key holds: a run start's, an operator command's
    lease.LeaseStore      the leader lease and its fencing counter
    schedules             cron schedule state
    members.MemberStore   the hubs alive, and the partition count they agree on
"""

from __future__ import annotations

from dataclasses import dataclass

from hub.store.agents import AgentStore
from hub.store.commands import CommandStore
from hub.store.cuelists import CuelistStore
from hub.store.idempotency import CommandKeys, IdempotencyStore
from hub.store.lease import LeaseStore
from hub.store.members import MemberStore
from hub.store.schedules import ScheduleStore
from hub.store.state import StateStore
from protocols.keys import Keys
from protocols.transport import Gateway, Storage


@dataclass(frozen=True)
class Stores:
    """Every store of one hub, sharing one client (the Transport's)."""

    state: StateStore
    cuelists: CuelistStore
    agents: AgentStore
    commands: CommandStore
    idempotency: IdempotencyStore
    command_keys: CommandKeys
    lease: LeaseStore
    schedules: ScheduleStore
    members: MemberStore

    @classmethod
    def open(
        cls, gateway: Gateway, keys: Keys, retention_s: float | None = None, partitions: int = 1
    ) -> Stores:
        """`retention_s`: how long a finished run's state is kept (None: for ever). The
        engine's stores are partition 0's; `partition` opens another's."""
        db = Storage.sharing(gateway)
        return cls(
            state=StateStore(db, keys, retention_s),
            cuelists=CuelistStore(db, keys, partitions),
            agents=AgentStore(db, keys),
            commands=CommandStore(db, keys),
            idempotency=IdempotencyStore(db, keys),
            command_keys=CommandKeys(db, keys),
            lease=LeaseStore(db, keys),
            schedules=ScheduleStore(db, keys),
            members=MemberStore(db, keys),
        )

    def partition(self, partition: int, retention_s: float | None = None) -> PartitionStores:
        """The stores one engine partition writes through (the same client)."""
        db = self.state.db
        return PartitionStores(
            state=StateStore(db, self.state.keys, retention_s, partition),
            commands=CommandStore(db, self.state.keys, partition),
            lease=LeaseStore(db, self.state.keys, partition),
        )


@dataclass(frozen=True)
class PartitionStores:
    """What one engine partition has of its own: its state, commands and lease."""

    state: StateStore
    commands: CommandStore
    lease: LeaseStore


__all__ = [
    "AgentStore",
    "CommandKeys",
    "CommandStore",
    "CuelistStore",
    "IdempotencyStore",
    "LeaseStore",
    "MemberStore",
    "PartitionStores",
    "ScheduleStore",
    "StateStore",
    "Stores",
]
