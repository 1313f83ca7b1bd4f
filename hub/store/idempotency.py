"""Idempotency keys in Redis: which run a key stands for, with which request, and whether
that run is known to have started.

A key lives PENDING_TTL_S while its run's start is not known to have been written (the API
claimed it, the command may be queued or lost), and DONE_TTL_S once the leader wrote the
run: that rewrite rides in the run's own fenced write, so "the run exists" and "the key
names it for a day" land together. A key whose command was lost is free again within
PENDING_TTL_S.
"""

from __future__ import annotations

from pydantic import BaseModel

from hub.store.layout import Op
from protocols.keys import Keys
from protocols.transport import Storage

PENDING_TTL_S = 60  # more than a command's answer takes (command_timeout_s) and a failover
DONE_TTL_S = 24 * 3600


class IdempotencyHold(BaseModel):
    """What an `Idempotency-Key` stands for: its run, the request's hash, and whether the
    run's start was written."""

    run_id: str
    request: str  # the fingerprint of the request body
    started: bool = False


class IdempotencyStore:
    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.keys = keys

    async def claim(self, key: str, hold: IdempotencyHold, ttl_s: int = PENDING_TTL_S) -> bool:
        """Take `key` for `hold` (SET NX with a TTL); False when someone holds it."""
        name = self.keys.idempotency(key)
        return await self.db.set(name, hold.model_dump_json(), nx=True, ex_s=ttl_s)

    async def get(self, key: str) -> IdempotencyHold | None:
        raw = await self.db.get(self.keys.idempotency(key))
        return IdempotencyHold.model_validate_json(raw) if raw is not None else None

    async def holder(self, key: str, hold: IdempotencyHold) -> IdempotencyHold:
        """Who holds `key` now; taken for `hold` when it had expired (its command waited
        in the queue past PENDING_TTL_S, and no retry took the key meanwhile)."""
        while True:
            held = await self.get(key)
            if held is not None:
                return held
            if await self.claim(key, hold):
                return hold

    def started(self, key: str, hold: IdempotencyHold) -> Op:
        """The write (for the run's own commit) that makes `key` name its started run."""
        done = hold.model_copy(update={"started": True}).model_dump_json()
        return ["SET", self.keys.idempotency(key), done, "EX", str(DONE_TTL_S)]

    async def release(self, key: str, run_id: str) -> None:
        """Let go of `key`, only if it still names `run_id` (its run certainly did not start)."""
        held = await self.get(key)
        if held is not None and held.run_id == run_id:
            await self.db.delete(self.keys.idempotency(key))
