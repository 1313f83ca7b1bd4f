"""The one place redis-py errors become protocols.errors (as httpx's map_httpcore_exceptions).

A Redis error reply starts with a code (`NOGROUP ...`, `OOM ...`, `READONLY ...`); the hub's
commit script answers `STALE ...` when its fencing token lost the lease. Codes are read
here and nowhere else; callers catch the classes of protocols.errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis import exceptions as rx

from protocols.errors import (
    CallboardError,
    GroupMissing,
    OutOfMemory,
    ReadOnly,
    StaleLeader,
    TransportError,
    Unreachable,
)

_BY_CODE: dict[str, type[CallboardError]] = {
    "NOGROUP": GroupMissing,
    "OOM": OutOfMemory,
    "READONLY": ReadOnly,
    "STALE": StaleLeader,  # the hub's commit script: the fencing token lost the lease
}
_BY_CLASS: dict[type[BaseException], type[CallboardError]] = {
    rx.OutOfMemoryError: OutOfMemory,
    rx.ReadOnlyError: ReadOnly,
}
_NOT_RETRIED = (rx.AuthenticationError, rx.AuthorizationError, rx.ExternalAuthProviderError)
# A Redis Cluster between states (a master down and not yet failed over or back, slots
# moving): worth retrying, as a lost connection is. Never raised by a single server.
_CLUSTER_PASSING = (rx.ClusterDownError, rx.TryAgainError, rx.SlotNotCoveredError)


# redis-py rewrites the error of a command in a pipeline it raises for: "Command # 1 (XPENDING
# ...) of pipeline caused error: ('NOGROUP ...',)" (found by review: NOGROUP went unread)
_IN_PIPELINE = " of pipeline caused error: "


def _code(exc: BaseException) -> str:
    text = str(exc)
    if text.startswith("Command # ") and _IN_PIPELINE in text:
        text = text.split(_IN_PIPELINE, 1)[1].lstrip("(\"'")
    return text.split(" ", 1)[0]


def is_group_missing(exc: BaseException) -> bool:
    """NOGROUP, or a blocked read whose stream was deleted under it."""
    if not isinstance(exc, rx.ResponseError):
        return False
    return _code(exc) == "NOGROUP" or "stream key no longer exists" in str(exc)


def is_busy_group(reply: object) -> bool:
    """BUSYGROUP: the consumer group exists already (creating it again is not an error)."""
    return isinstance(reply, rx.ResponseError) and _code(reply) == "BUSYGROUP"


def is_no_such_key(reply: object) -> bool:
    """`ERR no such key`: XINFO on a stream that does not exist."""
    return isinstance(reply, rx.ResponseError) and "no such key" in str(reply)


def lost_raised(replies: list[Any]) -> list[Any]:
    """The replies of a pipeline executed with `raise_on_error=False`, a lost connection
    among them raised: a cluster's pipeline hands it back as a command's reply where one
    server's raises it, so the call was neither retried nor failed (found by review: a
    listing read a lost reply as "nothing held there"); so is a cluster between states
    (CLUSTERDOWN, TRYAGAIN), worth retrying as it is. Error replies stay in place."""
    for reply in replies:
        if isinstance(reply, BaseException) and (
            not isinstance(reply, rx.ResponseError) or isinstance(reply, _CLUSTER_PASSING)
        ):
            raise reply
    return replies


def is_transient(exc: BaseException) -> bool:
    """A lost or refused connection, worth retrying (an authentication error is not)."""
    if isinstance(exc, _NOT_RETRIED):
        return False
    return isinstance(
        exc, (rx.ConnectionError, rx.TimeoutError, ConnectionError, *_CLUSTER_PASSING)
    )


def translate(exc: BaseException, op: str) -> CallboardError | None:
    """The protocols.errors exception for a redis-py (or socket) error; None for others."""
    if isinstance(exc, _CLUSTER_PASSING):
        return Unreachable(f"{op}: Redis Cluster unavailable: {exc}")
    if isinstance(exc, rx.ResponseError):
        if is_group_missing(exc):
            return GroupMissing(f"{op}: {exc}")
        # redis-py strips the OOM and READONLY codes into classes of its own
        cls = _BY_CLASS.get(type(exc)) or _BY_CODE.get(_code(exc), TransportError)
        if _code(exc) == "UNBLOCKED" and "replica" in str(exc):  # a blocked read cut short
            cls = ReadOnly  # as the server turned into a replica
        if cls is OutOfMemory:  # said in words a client of the API understands
            return OutOfMemory(f"{op}: Redis is out of memory (maxmemory reached): {exc}")
        return cls(f"{op}: {exc}")
    if is_transient(exc) or isinstance(exc, OSError):
        return Unreachable(f"{op}: Redis unreachable: {exc}")
    if isinstance(exc, rx.RedisError):
        return TransportError(f"{op}: {exc}")
    return None


@contextmanager
def translated(op: str) -> Iterator[None]:
    """Run the block; a Redis error leaving it is raised as its protocols.errors class."""
    try:
        yield
    except CallboardError:
        raise
    except Exception as exc:
        mapped = translate(exc, op)
        if mapped is None:
            raise
        raise mapped from exc
