"""The commands stream in Redis: operator commands queued for the engine's leader, the
filing of their answers: on the asking process's answer stream (hub.store.answers), or,
for a request that names none, on a short-lived list of its own; and the answers of the
commands whose effect is written, kept until the command is answered (`served_op`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hub.store.answers import ANSWER, ANSWER_ID, ANSWERS_MAXLEN, REPLY_TTL_S, Answers
from hub.store.layout import Op
from protocols.batching import Coalescer
from protocols.errors import TransportError
from protocols.keys import Keys
from protocols.transport import Command, Storage

GROUP = "engine"  # the consumer group the leading hub reads commands in
FIELD = "c"  # the one stream field holding a command (JSON)
Answered = tuple[str, str | None, bytes]  # command id, its asker (Keys.answers), answer
# A served command's answer is deleted with the command's XACK; the TTL only reclaims one
# whose step was replayed (a cluster's journal) after its command was answered otherwise.
SERVED_TTL_MS = 24 * 3600 * 1000
# Commands waiting in a partition's stream (served ones are deleted): past this many more
# are refused (503). While no hub holds the partition's lease only WAITING_LEADERLESS may
# wait, enough to ride out a failover; the stream no longer grows for as long as an outage
# lasts (each command may be up to the API's body limit).
WAITING_MAX = 10_000
WAITING_LEADERLESS = 1_000
# KEYS: the commands stream, the leader lease; ARGV: the two caps, then the commands. The
# number queued; when the stream holds too many, -1 (a hub leads) or -2 (none does).
_QUEUE = f"""
local cap, full = tonumber(ARGV[1]), -1
if redis.call('EXISTS', KEYS[2]) == 0 then cap, full = tonumber(ARGV[2]), -2 end
if redis.call('XLEN', KEYS[1]) + #ARGV - 2 > cap then return full end
for i = 3, #ARGV do redis.call('XADD', KEYS[1], '*', '{FIELD}', ARGV[i]) end
return #ARGV - 2
"""


class QueueFull(TransportError):
    """The partition's commands stream holds as many commands as it may (503: try later)."""


@dataclass(frozen=True, slots=True)
class QueuedCommand:
    """One entry of the commands stream: its id and the command's bytes as sent."""

    entry_id: str
    body: bytes


class CommandStore:
    def __init__(self, db: Storage, keys: Keys, partition: int = 0) -> None:
        self.db = db
        self.keys = keys
        self.partition = partition
        self.stream = keys.commands(partition)
        # commands queued at once (an API process's concurrent requests) share one XADD
        # pipeline: one round trip for the batch, in the order they were queued
        self._pushes = Coalescer(self._push_many, f"commands-{partition}")
        self._queue = db.script(_QUEUE)
        self.answers = Answers(db, keys)

    async def push(self, body: bytes) -> None:
        await self._pushes(body)

    async def _push_many(self, bodies: list[bytes]) -> list[None]:
        keys = [self.stream, self.keys.leader(self.partition)]
        queued = await self._queue(keys, [WAITING_MAX, WAITING_LEADERLESS, *bodies])
        if queued < 0:
            leader = "" if queued == -1 else " and no hub leads it"
            raise QueueFull(
                f"partition {self.partition}'s engine has too many commands waiting{leader}"
            )
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

    def served_op(self, command_id: str, answer: bytes) -> Op:
        """The operation that files `answer` as the answer of command `command_id`, to ride
        in the fenced write of the step that did what the command asked: served again (its
        answer was lost), the command is answered from it, not done twice. Its key shares
        the commands stream's slot (the partition's, on a cluster)."""
        return ["SET", self.keys.served(command_id, self.partition), answer, "PX", SERVED_TTL_MS]

    async def served(self, command_ids: list[str]) -> dict[str, bytes]:
        """The answers filed by `served_op` for these commands, by command id (one MGET,
        in one slot)."""
        found = await self.db.mget([self.keys.served(i, self.partition) for i in command_ids])
        return {i: answer for i, answer in zip(command_ids, found, strict=True) if answer}

    async def tries(self, consumer: str) -> dict[str, int]:
        """How many times each command pending on `consumer` was read (served)."""
        return await self.db.xpending_counts(self.stream, GROUP, consumer)

    async def answer(
        self, entry_ids: list[str], answers: list[Answered], filed_ids: Sequence[str] = ()
    ) -> None:
        """Each answer onto its asker's stream (or its own list), and the entries done, in
        one transaction: out of memory Redis refuses the answers but not the XACK and XDEL,
        so pipelined a command left its stream unanswered; refused whole, it stays pending
        and the next term serves it again. On a Redis Cluster no transaction spans slots:
        the answers go first (one MULTI per slot), and the entries are done once every
        answer landed, so an answer refused in one slot leaves every command of the batch
        to be served again. Both expire when no one reads them. The answers kept of served
        commands (`served_op`; `filed_ids`: the commands whose steps filed one) go with the
        entries: in their transaction, in their slot."""

        filed: list[Command] = []
        streams: set[str] = set()  # each asker's expires once a batch, after its answers
        for command_id, asker, answer in answers:
            if asker is None:
                reply = self.keys.reply(command_id)
                filed += [("RPUSH", reply, answer), ("EXPIRE", reply, REPLY_TTL_S)]
                continue
            stream = self.keys.answers(asker)
            filed.append((
                "XADD", stream, "MAXLEN", "~", ANSWERS_MAXLEN, "*",
                ANSWER_ID, command_id, ANSWER, answer,
            ))  # fmt: skip
            streams.add(stream)
        filed += [("EXPIRE", stream, REPLY_TTL_S) for stream in streams]
        done: list[Command] = [
            ("XACK", self.stream, GROUP, *entry_ids),
            ("XDEL", self.stream, *entry_ids),
        ]
        if filed_ids:
            done.append(("DEL", *(self.keys.served(i, self.partition) for i in filed_ids)))
        if not self.db.is_cluster:
            await self.db.commands("ANSWER COMMANDS", [*filed, *done], transaction=True)
            return
        if filed:
            await self.db.commands("ANSWER COMMANDS", filed, transaction=True)
        await self.db.commands("COMMANDS DONE", done, transaction=True)
