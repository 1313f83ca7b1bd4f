"""Done-markers in Redis: the specialist's one store, for side effects that must not run twice.

`SET {prefix}done:{AGENT}:{token} VALUE NX EX ttl`: the first replica to mark a token wins,
so a GO reclaimed after a crash can tell that a side effect already happened. The keys are
tagged with the agent, like its streams, so a completion's XADD, its XACK and its marker
go in one single-slot MULTI. Only SET, GET, EXISTS and DEL are used on them: what the
agent's ACL user (callboard.acl) is granted there.

A claim is a marker with a lease (`begin`): the inbox entry whose work holds an attempt,
`SET ... NX PX lease` then GET, renewed while the work goes on, deleted with its outcome.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from protocols.batching import Coalescer
from protocols.errors import OutOfMemory, ReadOnly
from protocols.keys import Keys
from protocols.transport import Gateway, Storage

_HELD = b""  # a claim's answer when another holds it (no holder is empty: an entry id)


class DoneMarkers:
    """Done-markers of one agent, shared by all its replicas."""

    def __init__(
        self, gateway: Gateway, keys: Keys, agent_id: str, ttl_s: int, lease_ms: int = 30_000
    ) -> None:
        self._db = Storage.sharing(gateway)
        self._keys = keys
        self._agent = agent_id
        self.ttl_s = ttl_s
        self.lease_ms = lease_ms  # a claim's life unless renewed (see `begin`)
        # (token, None) reads the marker; (token, holder) claims it (see `begin`)
        self._reads: Coalescer[tuple[str, bytes | None], bytes | None] = Coalescer(
            self._values, "done-markers"
        )

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
        return await self._reads((token, None)) is not None

    async def read_each(self, tokens: list[str]) -> list[str | None]:
        """The value under each token (None: not marked), in one round trip shared with
        every read made meanwhile."""
        return await self._each([(token, None) for token in tokens])

    async def begin(
        self, claim: str, holder: str, tokens: list[str]
    ) -> tuple[str | None, list[str | None]]:
        """Claim `claim` for `holder` unless another holds it, then read `tokens`, in that
        order and in one round trip shared with every read made meanwhile. Returns who
        holds the claim (`holder` when it is this call's now, or was already: a SET whose
        reply was lost and that the client sent again; None when it was held and is gone
        by the time it is read) and the values read.

        The claim is set first, so an outcome written (with its claim deleted) after it is
        seen by the reads. When it is held already (rare: a copy, a takeover), it is read
        in a second round trip, before `tokens` are read again: a claim gone by then (an
        outcome's DEL) leaves the outcome's marker to be seen. It lives `lease_ms` unless
        `renew` renews it. When Redis refuses writes (full, or a replica) the claim is not
        made and `holder` is answered: the work runs as it did before claims, rather than
        wait for a reclaim."""
        reads: list[tuple[str, bytes | None]] = [(t, None) for t in tokens]
        values = await self._each([(claim, holder.encode()), *reads])
        if values[0] == _HELD.decode():  # held already: by whom, then the markers again
            values = await self._each([(claim, None), *reads])
        return values[0], values[1:]

    async def renew(self, claims: dict[str, str]) -> None:
        """Another lease for each claim (token -> holder), in one round trip. A plain SET:
        a claim that lapsed (a refused write, a late renewal) is made again; one that its
        outcome deleted meanwhile lingers a lease at most (the outcome's marker is read
        first)."""
        if claims:
            await self._db.commands("SET", [
                ("SET", self._keys.done(self._agent, token), holder.encode(), "PX", self.lease_ms)
                for token, holder in claims.items()
            ])  # fmt: skip

    def release_command(self, claim: str) -> list[Any]:
        """The DEL of a claim, to ride in the write of the attempt's outcome."""
        return ["DEL", self._keys.done(self._agent, claim)]

    async def _each(self, items: list[tuple[str, bytes | None]]) -> list[str | None]:
        values = await asyncio.gather(*[self._reads.submit(item) for item in items])
        return [None if value is None else value.decode(errors="replace") for value in values]

    async def _values(self, items: list[tuple[str, bytes | None]]) -> list[bytes | None]:
        # a GET per key, pipelined: MGET is not among the commands the ACL grants on markers.
        # A claim is SET NX PX (not SET ... GET: Redis 7 only, and redis-py's parser for a
        # cluster reads its reply as a flag); answered as its holder when set, else _HELD
        commands = [
            ("GET", key) if holder is None else ("SET", key, holder, "NX", "PX", self.lease_ms)
            for key, holder in ((self._keys.done(self._agent, t), h) for t, h in items)
        ]
        try:
            replies = await self._db.commands("GET", commands)
        except (OutOfMemory, ReadOnly):
            if all(holder is None for _, holder in items):
                raise
            # writes refused: the reads alone, each claim answered as its holder's own
            reads = [item for item in items if item[1] is None]
            values = iter(await self._values(reads) if reads else [])
            return [holder if holder is not None else next(values) for _, holder in items]
        return [
            reply if holder is None else holder if reply else _HELD
            for (_, holder), reply in zip(items, replies, strict=True)
        ]

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
