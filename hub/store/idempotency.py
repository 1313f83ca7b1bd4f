"""Idempotency keys in Redis: which run a start's key stands for, with which request, and
whether that run is known to have started; what an operator command's key stands for, and
the reply it got.

A key lives PENDING_TTL_S while its run's start is not known to have been written (the API
claimed it, the command may be queued or lost), and DONE_TTL_S once the leader wrote the
run: that rewrite rides in the run's own fenced write, so "the run exists" and "the key
names it for a day" land together. A key whose command was lost is free again within
PENDING_TTL_S.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, Field

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


class ReplyHold(BaseModel):
    """What an A2A reply's message id stands for: its run, the message's fingerprint, and
    what the reply was read as (each action then sent with a key of its own)."""

    run_id: str
    request: str
    # (kind, name): ("go", cue) or ("condition", flag); none in a hold written before
    # actions were kept (it was applied then)
    actions: list[tuple[str, str]] = Field(default_factory=list)


H = TypeVar("H", IdempotencyHold, ReplyHold)


class IdempotencyStore:
    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.keys = keys

    async def claim(
        self, key: str, hold: IdempotencyHold | ReplyHold, ttl_s: int = PENDING_TTL_S
    ) -> bool:
        """Take `key` for `hold` (SET NX with a TTL); False when someone holds it. A run's
        hold names a run id of its request alone, so finding it there is having taken it
        (a lost reply's retry)."""
        name, value = self.keys.idempotency(key), hold.model_dump_json()
        if isinstance(hold, IdempotencyHold):
            return await self.db.set_free_or_mine(name, value, ex_s=ttl_s)
        return await self.db.set(name, value, nx=True, ex_s=ttl_s)

    async def get(self, key: str) -> IdempotencyHold | None:
        return await self._held(key, IdempotencyHold)

    async def reply(self, key: str) -> ReplyHold | None:
        """The hold of an A2A reply's key (one `claim`ed with a ReplyHold), if any."""
        return await self._held(key, ReplyHold)

    async def _held(self, key: str, model: type[H]) -> H | None:
        raw = await self.db.get(self.keys.idempotency(key))
        return model.model_validate_json(raw) if raw is not None else None

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

    async def release(self, key: str, hold: IdempotencyHold | ReplyHold) -> None:
        """Let go of `key`, only while it still holds `hold` as claimed (its run certainly
        did not start): one compare-and-delete, so a claim made in between is kept."""
        await self.db.delete_if(self.keys.idempotency(key), hold.model_dump_json())


class CommandHold(BaseModel):
    """What an operator command's `Idempotency-Key` stands for: the request's fingerprint
    and, once the command's step is written, its reply (kept DONE_TTL_S)."""

    request: str
    reply: dict[str, Any] | None = None


class CommandKeys:
    """The holds of operator commands' keys, one per key (Keys.command_idempotency; per
    partition too for a command every partition serves, partition 0's where the API looks):
    claimed by the API before it sends the command (PENDING_TTL_S), answered by the step
    that does what the command asks (`answered`, in that step's own fenced write)."""

    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.keys = keys

    async def claim(self, key: str, hold: CommandHold, partition: int = 0) -> bool:
        """Take `key` for `hold` (SET NX with PENDING_TTL_S); False when someone holds it."""
        name = self.keys.command_idempotency(key, partition)
        return await self.db.set(name, hold.model_dump_json(), nx=True, ex_s=PENDING_TTL_S)

    async def get(self, key: str, partition: int = 0) -> CommandHold | None:
        raw = await self.db.get(self.keys.command_idempotency(key, partition))
        return CommandHold.model_validate_json(raw) if raw is not None else None

    async def holder(self, key: str, hold: CommandHold, partition: int = 0) -> CommandHold:
        """Who holds `key` now; taken for `hold` when no one does (the API's claim expired
        while the command waited, or another partition's API claimed it)."""
        while True:
            held = await self.get(key, partition)
            if held is not None:
                return held
            if await self.claim(key, hold, partition):
                return hold

    def answered(self, key: str, request: str, reply: dict[str, Any], partition: int = 0) -> Op:
        """The write (for the command's own step) that keeps its reply under `key` a day."""
        done = CommandHold(request=request, reply=reply).model_dump_json()
        return ["SET", self.keys.command_idempotency(key, partition), done, "EX", str(DONE_TTL_S)]

    async def release(self, key: str, request: str) -> None:
        """Let go of `key` after its command was refused (nothing done, no reply kept), only
        while it still holds this request unanswered: one compare-and-delete, so a claim
        or a reply written in between is kept."""
        unanswered = CommandHold(request=request).model_dump_json()
        await self.db.delete_if(self.keys.command_idempotency(key), unanswered)
