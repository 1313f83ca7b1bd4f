"""The answers to one process's operator commands: a stream of its own, read by one task
for every command it waits on."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from protocols.errors import TransportError
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.transport import Storage

REPLY_TTL_S = 60  # an answer no one reads is dropped after this; so is a wait for one
ANSWERS_MAXLEN = 10_000  # an answer stream's bound (its reader deletes what it read)
ANSWERS_BLOCK_MS = 1_000
ANSWER_ID, ANSWER = "i", "a"  # an answer stream entry's fields: command id, answer (JSON)
log = logging.getLogger(__name__)


class Answers:
    """This process's answers, on a stream of its own: one task reads it for every command
    waiting (one connection and one read for a burst of answers, where a blocking pop per
    command held a pooled connection each, and 500 at once starved the hub's own engine of
    connections). The task runs while an answer is expected, and deletes what it read."""

    def __init__(self, db: Storage, keys: Keys) -> None:
        self.db = db
        self.asker = new_id()  # a Request's reply_to
        self.stream = keys.answers(self.asker)
        # command id -> its answer to be; in the order expected, for the sweep of old ones
        self._waiting: OrderedDict[str, tuple[float, asyncio.Future[bytes]]] = OrderedDict()
        self._reader: asyncio.Task[None] | None = None
        self._last = "0-0"  # the newest entry read (the stream is this process's alone)
        self._read_ids: list[str] = []  # read, not deleted yet
        self.keep_s: float = REPLY_TTL_S  # how long an answer expected is waited for
        self._open = 0  # answers expected and not in yet: the reader runs while there are

    def expect(self, command_id: str) -> None:
        """Before the command is sent: its answer will be kept for `wait` (REPLY_TTL_S)."""
        loop = asyncio.get_running_loop()
        self._drop(command_id)
        self._waiting[command_id] = (loop.time(), loop.create_future())
        self._open += 1
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(), name="command-answers")

    def forget(self, command_id: str) -> None:
        """The command was not sent after all."""
        self._drop(command_id)

    def _drop(self, command_id: str) -> None:
        found = self._waiting.pop(command_id, None)
        if found is not None and not found[1].done():
            self._open -= 1

    async def wait(self, command_id: str, timeout_s: float) -> bytes | None:
        if command_id not in self._waiting:
            self.expect(command_id)
        future = self._waiting[command_id][1]
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            return None
        finally:
            self._drop(command_id)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None

    async def _read(self) -> None:
        """Until every answer expected is in (checked with no pause before the task ends, so
        a command expected meanwhile starts a new reader): read answers, hand each to its
        waiter."""
        while self._open > 0:
            try:  # what the last round read is deleted with this round's read
                rows = await self.db.xdel_then_xread(
                    self.stream, self._read_ids, self._last, 1000, ANSWERS_BLOCK_MS
                )
                self._read_ids = []
            except TransportError as exc:  # Redis away: the waits time out unless it is back
                log.warning("reading command answers from %s: %s", self.stream, exc)
                await asyncio.sleep(ANSWERS_BLOCK_MS / 1000)
                continue
            for entry_id, fields in rows:
                self._last = entry_id
                self._read_ids.append(entry_id)
                waiting = self._waiting.get(fields.get(ANSWER_ID.encode(), b"").decode())
                if waiting is not None and not waiting[1].done():
                    waiting[1].set_result(fields.get(ANSWER.encode(), b""))
                    self._open -= 1
            self._sweep()

    def _sweep(self) -> None:
        """Forget answers expected longer ago than `keep_s` (a command sent, its answer
        never asked for): what is kept is bounded by what was sent in that time."""
        too_old = asyncio.get_running_loop().time() - self.keep_s
        while self._waiting:
            command_id, (at, _) = next(iter(self._waiting.items()))
            if at > too_old:
                return
            self._drop(command_id)
