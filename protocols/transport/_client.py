"""The Redis client, the one retry policy, and what a read hands out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.asyncio import Redis as Redis  # re-exported: the client type, for callers
from redis.asyncio.cluster import (
    AbstractStrategy,
    ClusterPipeline,
    RedisCluster,
    TransactionStrategy,
)
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from protocols.codec import Envelope
from protocols.errors import ProtocolError
from protocols.keys import STREAM_FIELD
from protocols.transport._errors import is_transient

T = TypeVar("T")
DEFAULT_RETRY_S = 10.0
_FIELD = STREAM_FIELD.encode()
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def wants_cluster(url: str) -> bool:
    """Whether `url` names a Redis Cluster: its scheme says so (`redis+cluster://`; the
    setting CALLBOARD_REDIS_CLUSTER=1 writes the URL so, see protocols.settings)."""
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def is_cluster(client: object) -> bool:
    """Whether `client` talks to a Redis Cluster (a RedisCluster, not a Redis)."""
    return isinstance(client, RedisCluster)


def socket_timeout_of(client: object) -> float | None:
    """The read timeout of the client's connections (None: none)."""
    if isinstance(client, RedisCluster):
        kwargs: dict[str, Any] = client.connection_kwargs
    else:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    timeout = kwargs.get("socket_timeout")
    return float(timeout) if isinstance(timeout, (int, float)) else None


# Commands whose first argument is their one key: what a MULTI of callboard's queues.
_KEY_FIRST = frozenset({
    "XADD", "XACK", "XDEL", "SET", "GET", "HSET", "HSETNX", "HDEL", "HINCRBY", "ZADD", "ZREM",
    "SADD", "SREM", "RPUSH", "EXPIRE", "PEXPIRE", "PERSIST", "INCR",
})  # fmt: skip
_ALL_KEYS = frozenset({"DEL"})  # commands whose every argument is a key


class _QueuedTransaction(TransactionStrategy):
    """redis-py's cluster MULTI/EXEC, queueing a command without a thread: its own queues
    each command by starting a thread that runs a new event loop (to await the slot's
    lookup from a sync method) and joins it, blocking the caller's loop: 5-12x the CPU a
    specialist spends per cue on a cluster (bench/cluster.py). A command whose one key is
    its first argument has its slot computed here, in place; anything else is redis-py's."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        client = self._pipe.cluster_client
        name = args[0].upper() if isinstance(args[0], str) else ""
        known = name in _KEY_FIRST or name in _ALL_KEYS
        if not known or len(args) < 2 or self._watching or client._initialize:
            return super().execute_command(*args, **kwargs)
        for key in args[1:] if name in _ALL_KEYS else args[1:2]:
            self._pipeline_slots.add(client.keyslot(key))
        return AbstractStrategy.execute_command(self, *args, **kwargs)


class _Cluster(RedisCluster):
    """A RedisCluster that finishes learning the cluster (slots, nodes) before it sends a
    command. Without this, concurrent first commands of a new client race its set-up:
    some see their connection closed after the server ran them, and redis-py sends them
    again (seen: a HINCRBY applied twice by 100 concurrent first calls). Its transactions
    queue commands in place (`_QueuedTransaction`)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if self._initialize:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: bool | None = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe = super().pipeline(transaction, shard_hint)
        if transaction:
            pipe._execution_strategy = _QueuedTransaction(pipe)
        return pipe


def _connect_cluster(url: str, options: dict[str, Any]) -> Redis:
    """A RedisCluster client for a cluster one of whose nodes `url` names. Typed as Redis:
    the commands callboard sends are the same, and the few places where a cluster
    differs (slots, transactions, scripts) ask `is_cluster`."""
    scheme, _, rest = url.partition("://")
    url = f"{CLUSTER_SCHEMES.get(scheme.lower(), scheme)}://{rest}"
    for single_only in ("timeout", "connection_class", "retry"):
        options.pop(single_only, None)  # the cluster client retries on MOVED/ASK itself
    options.setdefault("max_connections", 512)  # per node
    cluster = _Cluster.from_url(url, **options)
    return cast(Redis, cluster)


def connect(url: str, **options: Any) -> Redis:
    """An asyncio Redis client (hiredis parser when installed), bytes responses; a
    RedisCluster client when the URL or CALLBOARD_REDIS_CLUSTER says cluster."""
    options["decode_responses"] = False
    # No read timeout: blocking reads hold their socket for `block_ms` (redis-py's
    # default of 5 s would cut them off). Keepalive and resets detect a dead server.
    options.setdefault("socket_timeout", None)
    options.setdefault("socket_keepalive", True)
    options.setdefault("socket_connect_timeout", 5.0)
    options.setdefault("health_check_interval", 30)
    # A pool that waits for a free connection instead of failing; blocking reads each
    # hold one, so the cap is generous.
    options.setdefault("max_connections", 512)
    options.setdefault("timeout", 10.0)
    # One immediate retry on a fresh connection covers a pooled socket that a server
    # restart broke; longer outages are the Transport's (tenacity, with backoff).
    options.setdefault("retry", Retry(NoBackoff(), 1))
    # Name ourselves in CLIENT SETINFO: redis-py would otherwise read package metadata
    # on every new connection (a visible cost when replicas open many).
    if _DriverInfo is not None:
        options.setdefault("driver_info", _DriverInfo(name="callboard", lib_version="1"))
    if wants_cluster(url):
        return _connect_cluster(url, options)
    if _pack_command is not None and url.startswith("redis://"):
        options.setdefault("connection_class", _PackedConnection)
    pool = Pool.from_url(url, **options)
    return aioredis.Redis.from_pool(pool)


class Pool(aioredis.BlockingConnectionPool):
    """redis-py's BlockingConnectionPool (a command waits for a free connection rather than
    failing), with a direct path for the usual case.

    In redis-py 8.1 taking a free connection and giving it back costs 19-29 µs a command
    (an asyncio Condition, a timeout, an async context manager, metric and event hooks
    that do nothing here), a third of the client's CPU for a PING. When no command is
    waiting for a connection, redis-py's maintenance mode is off, and neither its metrics
    nor a credential provider (whose re-authentication is the one listener of a release)
    were configured when the pool was made, a free connection is taken and given back
    directly (0.8 µs): redis-py's check (`ensure_connection`: connect, or reconnect a
    socket with unread bytes or at its end) runs when the connection needs it. Whenever a
    command must wait, redis-py's own path runs, and wakes the waiters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = 0  # commands on redis-py's path (waiting, or about to)
        self.direct = self.connection_kwargs.get("credential_provider") is None and not (
            _redis_metrics_on()
        )

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        available = self._available_connections
        if available and self.direct and not self.waiting and not self._in_maintenance:
            connection = available.pop()
            self._in_use_connections.add(connection)
            try:
                clean = connection.is_connected and not await connection.can_read()
            except (RedisError, OSError):  # the socket broke: redis-py's check reconnects
                clean = False
            try:
                if not clean:
                    await self.ensure_connection(connection)
            except BaseException:
                await self.release(connection)
                raise
            return connection
        self.waiting += 1
        try:
            return await super().get_connection()  # type: ignore[no-untyped-call]
        finally:
            self.waiting -= 1

    async def release(self, connection: Any) -> None:
        if not self.direct or self.waiting or self._in_maintenance:
            await super().release(connection)
            return
        self._in_use_connections.remove(connection)
        if connection.should_reconnect():
            await connection.disconnect()
        self._available_connections.append(connection)


def _redis_metrics_on() -> bool:
    """Has redis-py's own OpenTelemetry metrics been switched on (they count connections
    as the pool hands them out)?"""
    try:
        from redis.observability.providers import get_observability_instance

        manager = get_observability_instance().get_provider_manager()
    except Exception:  # not in this redis-py, or not configured
        return False
    return manager is not None and bool(manager.config.enabled_telemetry)


_DriverInfo: Any
try:  # redis-py >= 8
    from redis.driver_info import DriverInfo as _DriverInfo
except ImportError:  # pragma: no cover
    _DriverInfo = None

_pack_command: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis packs commands in C: half the cost of a pipelined XADD on the hub's hot path
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - hiredis is a dependency
    _pack_command = None


class _PackedConnection(aioredis.Connection):
    """A TCP connection whose commands are packed by hiredis instead of in Python."""

    def pack_command(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " in head:  # "CONFIG GET", "XINFO CONSUMERS"...
            args = (*head.split(), *args[1:])
        pack = _pack_command  # set: this class is used only when hiredis is importable
        try:
            return [pack(args)] if pack is not None else super().pack_command(*args)
        except TypeError:  # an argument type hiredis does not take: the Python packer
            return super().pack_command(*args)

    def pack_commands(self, commands: Any) -> list[bytes]:
        return [b"".join(chunk for args in commands for chunk in self.pack_command(*args))]


@dataclass(slots=True)
class Delivery:
    """One stream entry handed to a consumer: decoded, or with the reason it is not."""

    stream: str
    entry_id: str
    raw: bytes
    deliveries: int = 1  # how many times the group has delivered this entry
    message: Envelope | None = None
    error: ProtocolError | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _ids_by_stream(deliveries: Sequence[Delivery]) -> dict[str, list[str]]:
    by_stream: dict[str, list[str]] = {}
    for delivery in deliveries:
        by_stream.setdefault(delivery.stream, []).append(delivery.entry_id)
    return by_stream


def ack_commands(deliveries: Sequence[Delivery], group: str) -> list[list[str]]:
    """The XACKs of `deliveries` (one per stream) as raw commands, for a caller that sends
    them inside its own atomic write (the hub's fenced script)."""
    return [["XACK", stream, group, *ids] for stream, ids in _ids_by_stream(deliveries).items()]


OnStateLost = Callable[[str, str], Awaitable[None]]  # (stream, group) recreated after NOGROUP


async def retry_transient(
    fn: Callable[[], Awaitable[T]],
    total_s: float = DEFAULT_RETRY_S,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> T:
    """`await fn()`, again on a lost connection (exponential backoff with jitter, at most
    `total_s` in all) until it succeeds or fails otherwise; the last error is raised.
    The one retry policy of every Redis call (the Transport's, the hub's state store's);
    `on_retry(error, seconds)` hears of each wait. The common case costs one call."""
    try:
        return await fn()
    except Exception as exc:
        if not is_transient(exc):
            raise

    def heard(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if on_retry is not None and error is not None:
            on_retry(error, state.upcoming_sleep)

    retrying = AsyncRetrying(
        stop=stop_after_delay(total_s),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_exception(is_transient),
        reraise=True,
        before_sleep=heard,
    )

    async def attempt() -> T:  # a coroutine function: tenacity awaits only those
        return await fn()

    return await retrying(attempt)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _stream_replies(response: Any) -> list[tuple[str, list[Any]]]:
    """XREAD/XREADGROUP replies as [(stream, [(id, fields)])], whatever shape redis-py gave."""
    if not response:
        return []
    pairs = response.items() if isinstance(response, dict) else response
    out = []
    for key, entries in pairs:
        if entries and isinstance(entries[0], list) and len(entries) == 1:
            entries = entries[0]  # RESP3 wraps the entry list once more
        out.append((_text(key), list(entries or [])))
    return out
