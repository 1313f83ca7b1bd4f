"""Idempotency keys in Redis: which run a key was first used for, and with which request."""

from __future__ import annotations

from pydantic import BaseModel

from protocols.keys import Keys
from protocols.transport import Storage


class IdempotencyHold(BaseModel):
    """What an `Idempotency-Key` stands for: the run it started and the request's hash."""

    run_id: str
    request: str  # the fingerprint of the request body


class IdempotencyStore:
    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.keys = keys

    async def claim(self, key: str, hold: IdempotencyHold, ttl_s: int) -> bool:
        """Take `key` for `hold` (SET NX with a TTL); False when someone holds it."""
        name = self.keys.idempotency(key)
        return await self.db.set(name, hold.model_dump_json(), nx=True, ex_s=ttl_s)

    async def get(self, key: str) -> IdempotencyHold | None:
        raw = await self.db.get(self.keys.idempotency(key))
        return IdempotencyHold.model_validate_json(raw) if raw is not None else None

    async def release(self, key: str, run_id: str) -> None:
        """Let go of `key`, only if it still names `run_id`."""
        held = await self.get(key)
        if held is not None and held.run_id == run_id:
            await self.db.delete(self.keys.idempotency(key))
