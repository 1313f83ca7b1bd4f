"""The base of all Redis access: a private client, the retry policy, the error translation.

The Transport (streams) and the Storage (typed commands for the state stores) are both
Gateways; nothing outside protocols/transport/ holds a client. Each call runs through
`_call`: retried on a lost connection for at most its `retry_s`, its Redis error raised as
its class in protocols.errors, and each try's reply due within REPLY_GRACE_S (a blocking
read's, `_read_call`, within its block and REPLY_GRACE_S): see protocols.transport._deadlines.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Self

from protocols.errors import OutOfMemory, ReadOnly, Unreachable
from protocols.transport._client import (
    DEFAULT_RETRY_S,
    Redis,
    T,
    _text,
    connect,
    is_cluster,
    retry_transient,
)
from protocols.transport._deadlines import Deadlines
from protocols.transport._errors import translated
from protocols.transport._wire import Command, pipelined

OnRetry = Callable[[BaseException, float], None]  # (error, seconds until the next attempt)
RECENT_REFUSAL_S = 10.0  # a write refused this recently is still the likely why
ScriptArg = str | bytes | int | float
# A reply may come this long after the command is sent (a blocking read's, after its block
# ends) before the call is taken for lost: a slow link, a big batch, a busy server
REPLY_GRACE_S = 10.0


class Gateway:
    """A Redis client that only this package touches, and how it is called."""

    def __init__(self, client: Redis, *, retry_s: float = DEFAULT_RETRY_S) -> None:
        self._client = client
        self.retry_s = retry_s  # 0: a lost connection is not retried (beyond the client's one)
        self._owns_client = False
        self._refused: tuple[float, OutOfMemory | ReadOnly] | None = None  # the last, and when
        self._deadlines = Deadlines()

    @property
    def is_cluster(self) -> bool:
        """Whether the client talks to a Redis Cluster (see protocols.transport._slots)."""
        return is_cluster(self._client)

    @classmethod
    def dedicated(cls, url: str, *, max_connections: int) -> Self:
        """A gateway with a client (and a pool of at most `max_connections`) of its own."""
        gateway = cls(connect(url, max_connections=max_connections))
        gateway._owns_client = True
        return gateway

    @classmethod
    def sharing(cls, other: Gateway, **options: Any) -> Self:
        """A gateway of this kind on `other`'s client (one pool); closing it is `other`'s."""
        return cls(other._client, **options)

    async def close(self) -> None:
        # A client passed in belongs to the caller; one made by from_url is ours.
        if self._owns_client:
            await self._client.aclose()

    async def _call(
        self,
        op: str,
        fn: Callable[[], Awaitable[T]],
        retry_s: float | None = None,
        on_retry: OnRetry | None = None,
        *,
        block_ms: int | None = None,
    ) -> T:
        """`await fn()`: retried on connection loss (`retry_s`, else the gateway's), its
        errors translated. A try whose reply never comes (a half-dead link: the server ran
        the command, its answer is lost) ends after its block (`block_ms`; None: it does
        not block; 0: it blocks for ever, and so is not bounded) and REPLY_GRACE_S, as
        Unreachable, not tried again; its connection is closed (redis-py's, on the
        cancellation). The common case costs one call and its registration."""
        total_s = self.retry_s if retry_s is None else retry_s
        call = None
        if block_ms != 0:
            call = self._deadlines.start((block_ms or 0) / 1000 + REPLY_GRACE_S)
        try:
            with translated(op):
                if total_s <= 0:
                    return await fn()
                if call is not None:  # each try has the whole deadline
                    return await retry_transient(partial(call.tried, fn), total_s, on_retry)
                return await retry_transient(fn, total_s, on_retry)
        except asyncio.CancelledError:
            if call is not None and self._deadlines.ended_it(call):
                raise Unreachable(
                    f"{op}: no reply within {call.deadline_s:.1f} s (a half-dead link)"
                ) from None
            raise
        except (OutOfMemory, ReadOnly) as exc:
            self._refused = (time.monotonic(), exc)  # for `write_refusal`: what was seen
            raise
        finally:
            if call is not None:
                self._deadlines.end(call)

    async def _read_call(self, op: str, fn: Callable[[], Awaitable[T]], block_ms: int | None) -> T:
        """`_call` for a read that blocks `block_ms` (None: not at all; 0: for ever)."""
        return await self._call(op, fn, block_ms=block_ms)

    async def _pipelined(
        self, op: str, commands: Sequence[Command], atomic: bool = False
    ) -> list[Any]:
        """Commands given as their words in one write, their replies raw (inside MULTI/EXEC
        when `atomic`): transport._wire's lean path, through `_call`."""
        return await self._call(op, lambda: pipelined(self._client, commands, atomic=atomic))

    async def ping(self) -> bool:
        """True when the server answers (no retry: a health check wants the truth now)."""
        return bool(await self._call("PING", lambda: self._client.ping(), retry_s=0))

    async def _newest_id(self, stream: str) -> str:
        """The newest entry's id, "0-0" for an empty or missing stream."""
        rows = await self._call("XREVRANGE", lambda: self._client.xrevrange(stream, count=1))
        return _text(rows[0][0]) if rows else "0-0"

    async def write_refusal(self, key: str | None = None) -> OutOfMemory | ReadOnly | None:
        """The error a write would get now (full with `noeviction`: OutOfMemory; a
        replica: ReadOnly), None when it takes writes. One INFO call, no retry, no write;
        on a cluster, INFO of the node that holds `key` (else of the default node)."""
        if self.is_cluster and key is not None:
            cluster: Any = self._client
            node = cluster.get_node_from_key(key)
            info = await self._call(
                "INFO", lambda: cluster.info("memory", "replication", target_nodes=node), retry_s=0
            )
        else:
            info = await self._call(
                "INFO", lambda: self._client.info("memory", "replication"), retry_s=0
            )
        if str(info.get("role", "master")) != "master":
            return ReadOnly("Redis refuses writes: it is a read-only replica (READONLY)")
        limit, used = int(info.get("maxmemory", 0) or 0), int(info.get("used_memory", 0) or 0)
        policy = str(info.get("maxmemory_policy", ""))
        if limit and used >= limit and policy == "noeviction":
            mib = 1024 * 1024
            return OutOfMemory(
                f"Redis is out of memory (OOM): {used / mib:.1f} of {limit / mib:.1f} MiB "
                "used, and it evicts nothing"
            )
        if self._refused is not None:  # memory hovering at the limit: a write refused lately
            at, refused = self._refused
            ago = time.monotonic() - at
            if ago < RECENT_REFUSAL_S:
                return type(refused)(f"{refused} ({ago:.1f} s ago)")
        return None

    def script(self, source: str) -> Script:
        """A Lua script, run by EVALSHA (loaded again when the server lost it)."""
        return Script(self, source)


class Script:
    """A registered Lua script; every key it touches is passed in KEYS (Redis Cluster)."""

    def __init__(self, gateway: Gateway, source: str) -> None:
        self._gateway = gateway
        self._script = gateway._client.register_script(source)

    async def __call__(
        self,
        keys: Sequence[str],
        args: Sequence[ScriptArg],
        *,
        retry_s: float | None = None,
        on_retry: OnRetry | None = None,
    ) -> Any:
        """The script's reply; an error reply is raised translated (STALE: StaleLeader)."""
        return await self._gateway._call(
            "EVALSHA", lambda: self._script(keys=keys, args=args), retry_s, on_retry
        )
