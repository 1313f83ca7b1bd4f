"""The one exception tree of callboard.

    CallboardError
    ├── ProtocolError              a message that breaks the wire protocol
    │   ├── DecodeError            bytes that are not a valid message (keeps the raw bytes)
    │   ├── UnknownMessageType     a message_type string that is not in MessageType
    │   └── OversizedMessage       an entry over the size limit
    ├── CuelistError               a cuelist that cannot be used (carries every Issue)
    ├── FilterError                a target filter that does not parse (names the position)
    ├── HandoffRejected            a handoff that misses keys its receiver requires
    ├── TransportError             Redis refused or failed a command (translated in one place)
    │   ├── Unreachable            the connection was lost, refused or timed out
    │   ├── OutOfMemory            OOM: the server is full and evicts nothing
    │   ├── ReadOnly               READONLY: the server is a replica (a failover is under way)
    │   └── StateLost              Redis came back empty: groups or state are gone
    │       └── GroupMissing       NOGROUP: a stream or its consumer group is gone
    └── EngineError                an operator request the run engine refuses
        ├── NotFound               unknown run, cue, cuelist or escalation  (HTTP 404)
        ├── Conflict               request not allowed in the current state  (HTTP 409)
        ├── Unprocessable          a request naming what its target has no use for (HTTP 422)
        └── StaleLeader            a state write under a fencing token that lost its lease

Redis errors become this tree in one place, protocols/transport/_errors.py (by the error
code a reply starts with: NOGROUP, OOM, READONLY, and STALE from the hub's commit script).
The REST API maps this tree to HTTP status codes in one place (hub/api/errors.py).
"""

from __future__ import annotations

from typing import Any


class CallboardError(Exception):
    """Base of every error callboard raises on purpose."""


class ProtocolError(CallboardError):
    """A message that breaks the wire protocol; `reason` is short and machine-friendly."""

    def __init__(self, reason: str, raw: bytes | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


class DecodeError(ProtocolError):
    """Bytes that do not decode to a valid envelope and payload."""


class UnknownMessageType(ProtocolError):
    """A message_type that callboard does not define."""


class OversizedMessage(ProtocolError):
    """An entry larger than the configured limit."""


class CuelistError(CallboardError):
    """A cuelist that cannot be used; `issues` lists every problem found, not just the first."""

    def __init__(self, issues: list[Any]) -> None:
        self.issues = issues
        first = issues[0] if issues else "invalid cuelist"
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        super().__init__(f"{first}{more}")


class FilterError(CallboardError):
    """A `target.filter` expression that does not parse; `position` is 1-based (column)."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at position {position})")
        self.position = position


class HandoffRejected(CallboardError):
    """A handoff refused by the contracts; `missing` names the keys the receiver needs."""

    def __init__(self, message: str, missing: list[str] | None = None) -> None:
        super().__init__(message)
        self.missing = missing or []


class TransportError(CallboardError):
    """Redis could not be reached or answered with an error we cannot handle."""


class Unreachable(TransportError):
    """The connection to Redis was lost, refused or timed out (worth retrying)."""


class OutOfMemory(TransportError):
    """Redis refused a write: it is at `maxmemory` and evicts nothing (OOM)."""


class ReadOnly(TransportError):
    """Redis refused a write: this server is a replica (READONLY), e.g. during a failover."""


class StateLost(TransportError):
    """Redis came back without our streams or groups (restarted with no persistence)."""


class GroupMissing(StateLost):
    """NOGROUP: the stream or its consumer group is gone (Redis restarted empty, key deleted)."""


class EngineError(CallboardError):
    """An operator request that the run engine refuses."""


class NotFound(EngineError):
    """Unknown run, cue, cuelist, agent or escalation."""


class Conflict(EngineError):
    """The request does not fit the current state (e.g. GO for a cue that is not armed)."""


class Unprocessable(EngineError):
    """A request that names something its target has no use for (a condition no cue of the
    run waits for); `fields` go into the answer beside `detail` (what would be used)."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.fields = fields


class StaleLeader(EngineError):
    """A state write under a fencing token that no longer holds the leader lease."""
