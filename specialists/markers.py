"""Done-markers in Redis: the specialist's one store, for side effects that must not run twice.

`SET {prefix}done:{AGENT}:{token} VALUE NX EX ttl`: the first replica to mark a token wins,
so a GO reclaimed after a crash can tell that a side effect already happened. The keys are
tagged with the agent, like its streams, so a completion's XADD, its XACK and its marker
go in one single-slot MULTI. Only SET, GET, EXISTS and DEL are used on them: what the
agent's ACL user (callboard.acl) is granted there.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from protocols.batching import Coalescer
from protocols.keys import Keys
from protocols.transport import Gateway, Storage


class DoneMarkers:
    """Done-markers of one agent, shared by all its replicas."""

    def __init__(self, gateway: Gateway, keys: Keys, agent_id: str, ttl_s: int) -> None:
        self._db = Storage.sharing(gateway)
        self._keys = keys
        self._agent = agent_id
        self.ttl_s = ttl_s
        self._reads: Coalescer[str, bytes | None] = Coalescer(self._values, "done-markers")

    def set_command(self, token: str, value: str = "1") -> list[Any]:
        """The SET of `mark` (or, with `value`, of `put`, NX still: the first value stays),
        to ride in another round trip (see Transport.publish_many)."""
        key = self._keys.done(self._agent, token)
        return ["SET", key, value.encode(), "NX", "EX", self.ttl_s]

    async def mark(self, token: str, ttl_s: int | None = None) -> bool:
        """True when this call set the marker, False when it was already there. The value
        is this call's own, so a SET whose reply was lost and that the client sent again
        is known as this call's (`set_free_or_mine`): with "1" for everyone, the retry found
        the key taken and said False, and no replica did the side effect."""
        key = self._keys.done(self._agent, token)
        mine = uuid.uuid4().hex.encode()
        return await self._db.set_free_or_mine(key, mine, ex_s=ttl_s or self.ttl_s)

    async def is_marked(self, token: str) -> bool:
        """Whether `token` is marked; concurrent reads share one round trip."""
        return await self._reads(token) is not None

    async def read_each(self, tokens: list[str]) -> list[str | None]:
        """The value under each token (None: not marked), in one round trip shared with
        every read made meanwhile."""
        values = await asyncio.gather(*[self._reads.submit(token) for token in tokens])
        return [None if value is None else value.decode(errors="replace") for value in values]

    async def _values(self, tokens: list[str]) -> list[bytes | None]:
        # a GET per key, pipelined: MGET is not among the commands the ACL grants on markers
        keys = [self._keys.done(self._agent, t) for t in tokens]
        return list(await self._db.commands("GET", [("GET", key) for key in keys]))

    async def put(self, token: str, value: str, ttl_s: int | None = None) -> None:
        """A marker that holds a value (e.g. the id of remote work this cue started), so
        a replica that takes the work over can find it; overwrites."""
        key = self._keys.done(self._agent, token)
        await self._db.set(key, value.encode(), ex_s=ttl_s or self.ttl_s)

    async def get(self, token: str) -> str | None:
        """The value `put` stored under `token`, or None."""
        value = await self._db.get(self._keys.done(self._agent, token))
        return None if value is None else value.decode(errors="replace")

    async def clear(self, token: str) -> None:
        await self._db.delete(self._keys.done(self._agent, token))
