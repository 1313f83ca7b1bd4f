"""What a handler gets and returns: `Cue` (alias `Job`), `Result`, `Handoff` and `Entry`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from protocols.codec import Envelope
from protocols.messages import MessageType
from protocols.payloads import (
    Artifact,
    EscalationError,
    HandoffContext,
    Payload,
    StatusBlocked,
    TaskHandoff,
    Usage,
)
from protocols.states import Severity
from specialists.context import ContextReader
from specialists.markers import DoneMarkers

Say = Callable[[MessageType, Payload], Awaitable[None]]
CUE_REASON_CHARS = 2000  # of a blocked or not-ready reason, shown on the cue by the hub


@dataclass(frozen=True, slots=True)
class Entry:
    """A shared-context value with its tags and metadata."""

    value: Any
    tags: Sequence[str] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Handoff:
    """A `task.handoff` to send before completing: `context` keys are the context it provides."""

    to: str
    context: Mapping[str, Any] = field(default_factory=dict)
    work_completed: Sequence[str] = ()
    artifacts_produced: Sequence[Artifact | Mapping[str, str]] = ()
    next_steps: Sequence[str] = ()
    constraints: Sequence[str] = ()

    def payload(self, from_agent: str, task_id: str, attempt: int) -> TaskHandoff:
        data: dict[str, Any] = dict(self.context)
        for name in ("work_completed", "artifacts_produced", "next_steps", "constraints"):
            value = getattr(self, name)
            if value:  # an explicit standard field wins over a context key of the same name
                data[name] = list(value)
        return TaskHandoff(
            from_agent=from_agent,
            to_agent=self.to,
            task_id=task_id,
            attempt=attempt,
            handoff_context=HandoffContext.model_validate(data),
        )


@dataclass(slots=True)
class Result:
    """What `execute` returns. A plain dict returned instead is taken as `Result(result=...)`.

    `context` entries are written to the run's shared context (values, or `Entry` for tags
    and metadata); `handoff` is sent after them and before `status.completed`; `usage`
    (`Usage(tokens=..., cost=..., counters={...})` or a mapping of those) is reported with
    it and counted against the run's budget.
    """

    result: dict[str, Any] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)
    handoff: Handoff | None = None
    usage: Usage | Mapping[str, Any] | None = None

    def usage_payload(self) -> Usage | None:
        """`usage` as the protocol's model (ValidationError when it is not a usage)."""
        if self.usage is None or isinstance(self.usage, Usage):
            return self.usage
        return Usage.model_validate(dict(self.usage))

    @classmethod
    def coerce(cls, value: Result | Mapping[str, Any] | None) -> Result:
        if value is None:
            return cls()
        if isinstance(value, Result):
            return value
        if isinstance(value, Mapping):
            return cls(result=dict(value))
        raise TypeError(f"execute must return a Result, a dict or None, not {type(value).__name__}")


def token(run_id: str | None, cue_id: str, attempt: int | None, name: str) -> str:
    """The done-marker token of `name` for a cue's attempt (None: for all its attempts)."""
    scope = f"{run_id or '-'}:{cue_id}"
    return f"{scope}:{attempt}:{name}" if attempt is not None else f"{scope}:{name}"


class Cue:
    """One cue (or direct task) on this replica, passed to `prepare`, `ready` and `execute`.

    The same object is handed to every phase this replica sees for one (run, cue, attempt),
    so `state` can carry what `prepare` set up over to `execute`.
    """

    def __init__(
        self,
        *,
        agent_id: str,
        replica: str,
        run_id: str | None,
        cue_id: str,
        attempt: int,
        message: Envelope,
        markers: DoneMarkers,
        action: Mapping[str, Any] | None = None,
        reader: ContextReader | None = None,
        say: Say | None = None,
    ) -> None:
        self.reader = reader
        self.agent_id = agent_id
        self.replica = replica
        self.run_id = run_id
        self.cue_id = cue_id
        self.attempt = attempt
        self.message = message  # the envelope of the phase being handled
        self.action: dict[str, Any] = dict(action or {})
        self.description = ""  # the cue's description in the cuelist (with GO / assign)
        self.deliveries = 1  # how often the GO (or assign) was delivered: > 1 after a crash
        self.preparation_required: list[str] = []
        self.ready_check: list[str] = []
        self.state: dict[str, Any] = {}  # the author's scratch space across phases
        self.prepare_error: str | None = None  # why `prepare` failed on this replica
        self._context: dict[str, Any] = {}
        self.pending_context: dict[str, Entry] = {}  # put_context, not yet sent
        self._markers = markers
        self._say = say

    @property
    def context(self) -> dict[str, Any]:
        """The context GO (or task.assign) carried: the handoff context given to this cue."""
        return self._context

    def put_context(
        self,
        key: str,
        value: Any,
        tags: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Queue a shared-context write; it is sent with this cue's completion (or failure)."""
        self.pending_context[key] = Entry(value, tuple(tags), dict(metadata or {}))

    async def read_context(
        self, key: str | None = None, *, tag: str | None = None, source: str | None = None
    ) -> Any:
        """The run's shared context, read through the hub's API.

        With `key`: that entry's value (None when absent). Otherwise every entry
        `{value, source, timestamp, tags, metadata}` by key, filtered by `tag` / `source`.
        """
        if self.run_id is None or self.reader is None:
            return None if key is not None else {}
        entries = await self.reader.entries(self.run_id, tag=tag, source=source)
        if key is not None:
            return entries.get(key, {}).get("value")
        return entries

    # -- saying something while the work goes on ------------------------------------------

    async def blocked(self, reason: str) -> None:
        """`status.blocked` now: the hub shows `reason` on the cue; nothing fails."""
        await self._send(
            MessageType.STATUS_BLOCKED,
            StatusBlocked(
                attempt=self.attempt, reason=reason[:CUE_REASON_CHARS], replica=self.replica
            ),
        )

    async def escalate(self, cause: str, detail: str, severity: Severity = Severity.MEDIUM) -> None:
        """`escalation.error` about this cue now. A `cause` starting with `input_required`
        asks an operator a question: the answer comes back as `task.input` (`on_input`)."""
        payload = EscalationError(severity=severity, cause=cause[:500], detail=detail[:2000])
        await self._send(MessageType.ESCALATION_ERROR, payload)

    async def _send(self, message_type: MessageType, payload: Payload) -> None:
        if self._say is None:
            raise RuntimeError("this cue cannot send messages (not handed out by a replica)")
        await self._say(message_type, payload)

    # -- done-markers --------------------------------------------------------------------

    def token(self, name: str, *, per_attempt: bool = True) -> str:
        """The done-marker token of `name` for this cue (and attempt, unless per_attempt=False)."""
        return token(self.run_id, self.cue_id, self.attempt if per_attempt else None, name)

    async def mark_done(self, name: str, *, per_attempt: bool = True) -> bool:
        """Mark `name` done for this cue; True if this call marked it (nobody did before)."""
        return await self._markers.mark(self.token(name, per_attempt=per_attempt))

    async def already_done(self, name: str, *, per_attempt: bool = True) -> bool:
        return await self._markers.is_marked(self.token(name, per_attempt=per_attempt))

    async def remember(self, name: str, value: str, *, per_attempt: bool = True) -> None:
        """Keep `value` in a done-marker of this cue (e.g. the id of remote work it
        started), so the replica that takes a redelivered GO over can find it."""
        await self._markers.put(self.token(name, per_attempt=per_attempt), value)

    async def recall(self, name: str, *, per_attempt: bool = True) -> str | None:
        """The value `remember` kept under `name`, or None."""
        return await self._markers.get(self.token(name, per_attempt=per_attempt))

    @asynccontextmanager
    async def once(self, name: str, *, per_attempt: bool = True) -> AsyncIterator[bool]:
        """`async with cue.once("charge") as first: if first: ...` runs a side effect at most
        once across replicas. The marker is set on entry and removed if the block raises
        (the effect is taken as not done), but kept when the block is cancelled (a replica
        stopping past its drain time: whether the effect happened is unknown, and at most
        once wins over at least once)."""
        token = self.token(name, per_attempt=per_attempt)
        first = await self._markers.mark(token)
        try:
            yield first
        except asyncio.CancelledError:
            raise
        except BaseException:
            if first:
                await self._markers.clear(token)
            raise

    def __repr__(self) -> str:
        return f"Cue(run_id={self.run_id!r}, cue_id={self.cue_id!r}, attempt={self.attempt})"


Job = Cue  # the name a `task.assign` handler may prefer
