"""Everything an agent writes to its out stream, read in the background as the hub would see
it (decoded, or with the reason it is not), with waits on what has arrived."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from protocols.codec import Envelope
from protocols.errors import TransportError
from protocols.payloads import Payload
from protocols.transport import Probe

log = logging.getLogger("callboard.conformance")
Match = Callable[[Envelope], bool]
P = TypeVar("P", bound=Payload)


@dataclass(frozen=True, slots=True)
class Seen:
    """One entry of the out stream, in the order written."""

    index: int
    entry_id: str
    message: Envelope | None
    error: str  # why it does not decode ("" when it does)
    raw: bytes

    @property
    def msg(self) -> Envelope:
        """The decoded message (only decoded entries are ever matched)."""
        if self.message is None:
            raise ValueError(f"entry {self.entry_id} does not decode: {self.error}")
        return self.message

    def body(self, model: type[P]) -> P:
        """The payload, typed: the codec already checked it against its type's model."""
        payload = self.msg.payload
        if not isinstance(payload, model):
            raise TypeError(f"{self.msg.message_type.value} carries {type(payload).__name__}")
        return payload


class OutWatch:
    """Reads `stream` after `start_id` until stopped; `seen` grows in stream order."""

    def __init__(self, probe: Probe, stream: str, start_id: str, block_ms: int = 200) -> None:
        self.probe = probe
        self.stream = stream
        self.last_id = start_id
        self.block_ms = block_ms
        self.seen: list[Seen] = []
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._read())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self) -> None:
        while True:
            try:
                got = await self.probe.read_after(self.stream, self.last_id, block_ms=self.block_ms)
            except TransportError as exc:  # the kit keeps watching; a check will time out
                log.warning("reading %s failed: %s", self.stream, exc)
                await asyncio.sleep(0.2)
                continue
            for d in got:
                self.last_id = d.entry_id
                error = "" if d.error is None else d.error.reason
                self.seen.append(Seen(len(self.seen), d.entry_id, d.message, error, d.raw))
            if got:
                self._arrived.set()
                self._arrived = asyncio.Event()

    @property
    def mark(self) -> int:
        """A position: `messages(after=mark)` is what arrives from now on."""
        return len(self.seen)

    def messages(self, match: Match | None = None, after: int = 0) -> list[Seen]:
        """Decoded entries (from position `after`) that `match`, in stream order."""
        return [
            s
            for s in self.seen[after:]
            if s.message is not None and (match is None or match(s.message))
        ]

    async def wait(self, match: Match, timeout_s: float, count: int = 1) -> list[Seen]:
        """Wait until `count` entries match (or `timeout_s` passed); returns those found."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while len(found := self.messages(match)) < count:
            left = deadline - loop.time()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)
        return found
