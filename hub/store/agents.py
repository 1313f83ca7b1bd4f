"""The registry's records in Redis: one hash field per agent (its contract and replicas)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from protocols.keys import Keys
from protocols.transport import Storage


class ReplicaRecord(BaseModel):
    """What `status.online` / `status.offline` said of one replica, and when."""

    online: bool = False
    since: float | None = None
    concurrency: int = 1
    last_seen: float | None = None
    reason: str | None = None  # why it went offline


class AgentRecord(BaseModel):
    """One agent as registered: its kind, its contract (as JSON) and its replicas."""

    agent: str
    kind: str = ""
    contract: dict[str, Any] = Field(default_factory=dict)
    replicas: dict[str, ReplicaRecord] = Field(default_factory=dict)
    first_seen: float = 0.0


class AgentStore:
    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.keys = keys

    async def load(self) -> dict[str, AgentRecord]:
        raw = await self.db.hgetall(self.keys.agents)
        return {k.decode(): AgentRecord.model_validate_json(v) for k, v in raw.items()}

    async def save(self, records: Iterable[AgentRecord]) -> None:
        mapping = {r.agent: r.model_dump_json() for r in records}
        await self.db.hset(self.keys.agents, mapping)
