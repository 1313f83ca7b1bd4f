"""The commands stream in Redis: operator commands queued for the engine's leader, and the
way their answers come back: on the asking process's own answer stream, read by one task
for every command it waits on (`Answers`), or, for a request that names none, on a
short-lived list of its own."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass

from protocols.batching import Coalescer
from protocols.errors import TransportError
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.transport import Pipeline, Storage

GROUP = "engine"  # the consumer group the leading hub reads commands in
REPLY_TTL_S = 60  # an answer no one reads is dropped after this; so is a wait for one
FIELD = "c"  # the one stream field holding a command (JSON)
ANSWERS_MAXLEN = 10_000  # an answer stream's bound (its reader deletes what it read)
ANSWERS_BLOCK_MS = 1_000
ANSWER_ID, ANSWER = "i", "a"  # an answer stream entry's fields: command id, answer (JSON)
Answered = tuple[str, str | None, bytes]  # command id, its asker (Keys.answers), answer
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueuedCommand:
    """One entry of the commands stream: its id and the command's bytes as sent."""

    entry_id: str
    body: bytes


class CommandStore:
    def __init__(self, db: Storage, keys: Keys, partition: int = 0) -> None:
        self.db = db
        self.keys = keys
        self.stream = keys.commands(partition)
        # commands queued at once (an API process's concurrent requests) share one XADD
        # pipeline: one round trip for the batch, in the order they were queued
        self._pushes = Coalescer(self._push_many, f"commands-{partition}")
        self.answers = Answers(db, keys)

    async def push(self, body: bytes) -> None:
        await self._pushes(body)

    async def _push_many(self, bodies: list[bytes]) -> list[None]:
        def build(pipe: Pipeline) -> None:
            for body in bodies:
                pipe.xadd(self.stream, {FIELD: body})

        await self.db.pipeline("QUEUE COMMANDS", build)
        return [None] * len(bodies)

    async def wait_answer(self, command_id: str, timeout_s: float) -> bytes | None:
        """The answer to `command_id` (sent with `self.answers.asker`), waiting up to
        `timeout_s`; None when none came."""
        return await self.answers.wait(command_id, timeout_s)

    async def writes_refused(self) -> TransportError | None:
        """Why Redis would refuse the leader's writes now (out of memory, read-only)."""
        try:
            return await self.db.write_refusal(self.stream)
        except TransportError:
            return None

    async def ensure_group(self) -> None:
        """The leader's consumer group, from the stream's start: a command queued before
        any hub led (the partition's first term) is served too, as one queued while a
        leader was away is (answered commands are deleted). An existing group is kept."""
        await self.db.create_group(self.stream, GROUP, "0")

    async def read(
        self, consumer: str, start: str, count: int, block_ms: int | None
    ) -> list[QueuedCommand]:
        """Commands for `consumer`: its own pending ones ("0") or new ones (">")."""
        rows = await self.db.xreadgroup(self.stream, GROUP, consumer, start, count, block_ms)
        return [
            QueuedCommand(entry_id, fields.get(FIELD.encode(), b"")) for entry_id, fields in rows
        ]

    async def claim_all(self, consumer: str) -> int:
        """Every command pending on any consumer (a hub that no longer leads) moves to
        `consumer` at once; their delivery counts are kept (each read counts one try)."""
        return await self.db.claim_others(self.stream, GROUP, consumer)

    async def tries(self, consumer: str) -> dict[str, int]:
        """How many times each command pending on `consumer` was read (served)."""
        return await self.db.xpending_counts(self.stream, GROUP, consumer)

    async def answer(self, entry_ids: list[str], answers: list[Answered]) -> None:
        """Each answer onto its asker's stream (or its own list), and the entries done, in
        one trip. Both expire when no one reads them."""

        def build(pipe: Pipeline) -> None:
            for command_id, asker, answer in answers:
                if asker is None:
                    pipe.rpush(self.keys.reply(command_id), answer)
                    pipe.expire(self.keys.reply(command_id), REPLY_TTL_S)
                    continue
                stream = self.keys.answers(asker)
                fields = {ANSWER_ID: command_id, ANSWER: answer}
                pipe.xadd(stream, fields, maxlen=ANSWERS_MAXLEN, approximate=True)  # type: ignore[arg-type]
                pipe.expire(stream, REPLY_TTL_S)
            pipe.xack(self.stream, GROUP, *entry_ids)
            pipe.xdel(self.stream, *entry_ids)

        await self.db.pipeline("ANSWER COMMANDS", build)


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
            try:
                if self._read_ids:  # what the last round read, deleted with this round
                    await self.db.xdel(self.stream, self._read_ids)
                    self._read_ids = []
                rows = await self.db.xread(self.stream, self._last, 1000, ANSWERS_BLOCK_MS)
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
