"""Done-markers in Redis: the specialist's one store, for side effects that must not run twice.

`SET {prefix}done:{AGENT}:{token} 1 NX EX ttl`: the first replica to mark a token wins,
so a GO reclaimed after a crash can tell that a side effect already happened. The keys are
tagged with the agent, like its streams, so a completion's XADD, its XACK and its marker
go in one single-slot MULTI.
"""

from __future__ import annotations

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
        self._exists: Coalescer[str, bool] = Coalescer(self._any_marked, "done-markers")

    def set_command(self, token: str) -> list[Any]:
        """The SET of `mark`, to ride in another round trip (see Transport.publish_many)."""
        return ["SET", self._keys.done(self._agent, token), b"1", "NX", "EX", self.ttl_s]

    async def mark(self, token: str, ttl_s: int | None = None) -> bool:
        """True when this call set the marker, False when it was already there."""
        key = self._keys.done(self._agent, token)
        return await self._db.set(key, b"1", nx=True, ex_s=ttl_s or self.ttl_s)

    async def is_marked(self, token: str) -> bool:
        """Whether `token` is marked; concurrent checks share one MGET."""
        return await self._exists(token)

    async def _any_marked(self, tokens: list[str]) -> list[bool]:
        values = await self._db.mget([self._keys.done(self._agent, t) for t in tokens])
        return [value is not None for value in values]

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
