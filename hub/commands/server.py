"""Serving commands on the leading hub: read them in a consumer group, run each one's
handler (engine steps), and file every answer in one round trip.

A handler is given the command and its id. One whose engine step does what the command
asks files its answer in that step's own fenced write (`CommandStore.served_op`): a command
read again (its server's answer was lost: Redis refused or dropped it, the term ended
first) is answered from that, not served twice, so an operator whose GO took effect is
not told it failed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from hub.commands.models import (
    ASKER_PATTERN,
    Answer,
    Command,
    ErrorCode,
    Reply,
    Request,
    answer_of,
)
from hub.store.commands import Answered, CommandStore, QueuedCommand
from protocols.errors import (
    CallboardError,
    Conflict,
    GroupMissing,
    NotFound,
    OutOfMemory,
    StaleLeader,
    TransportError,
    Unreachable,
)

log = logging.getLogger(__name__)

RETRY_S = 0.5
BATCH = 100  # commands read at once
RECENT = 1_000  # answers of commands served last, kept for their copies
C = TypeVar("C", bound=Command[Any])
# serves one command, given it and its id (under which its answer may be filed)
Handler = Callable[[C, str], Awaitable[Reply]]


class Handlers:
    """Which coroutine serves each kind of command, and what to look up once for a batch
    of them before any is served (`before`)."""

    def __init__(self) -> None:
        self._by_kind: dict[type[Command[Any]], Handler[Any]] = {}
        self._files: set[type[Command[Any]]] = set()
        self.before: Callable[[Sequence[Command[Any]]], Awaitable[None]] | None = None

    def on(self, kind: type[C], handler: Handler[C], *, files: bool = True) -> Handlers:
        """`handler` serves `kind`; `files`: its step files the command's answer (a kind
        that is idempotent by itself, as a start naming its run, need not)."""
        self._by_kind[kind] = handler
        if files:
            self._files.add(kind)
        return self

    def files(self, command: Command[Any]) -> bool:
        return type(command) in self._files

    def on_batch(self, before: Callable[[Sequence[Command[Any]]], Awaitable[None]]) -> Handlers:
        self.before = before
        return self

    def of(self, command: Command[Any]) -> Handler[Any] | None:
        return self._by_kind.get(type(command))


class CommandServer:
    def __init__(
        self, store: CommandStore, consumer: str, handlers: Handlers, max_tries: int = 3,
        fence: Callable[[], Awaitable[None]] | None = None,
    ) -> None:  # fmt: skip
        self.store = store
        self.consumer = consumer
        self.handlers = handlers
        self.max_tries = max_tries  # reads of one command before it is answered "failing"
        # StaleLeader unless this server's hub still holds the lease: checked before
        # answering, as a refusal (404, 409) read from a stale engine writes nothing the
        # lease fences, yet deletes the command the leader would have served
        self.fence = fence
        # the answers of the commands served last (by id): a copy read later gets its own
        self._recent: OrderedDict[str, Answered] = OrderedDict()

    async def run(self, stop: asyncio.Event) -> None:
        ready = False
        while not stop.is_set():
            try:
                if not ready:
                    await self.store.ensure_group()
                    # what the hubs that led before read and never answered is served
                    # now, not after an idle limit
                    await self.store.claim_all(self.consumer)
                    ready = True
                await self._read(stop)
            except (Unreachable, GroupMissing) as exc:
                # A Redis restart must not cost the hub its leadership: wait and read again
                # (recreating the group if Redis came back empty). Anything else is a bug.
                ready = ready and not isinstance(exc, GroupMissing)
                log.warning("commands: %s; retrying", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RETRY_S)

    async def _read(self, stop: asyncio.Event) -> None:
        # own pending first (a restarted leader finishes what it had read; so does one whose
        # answers failed to land, entering here again), then new ones. Its own are read only
        # when some may be there: on entering, after a claim moved some, or while a full
        # batch of them was read last time (every batch served is answered and acknowledged)
        own = True
        while not stop.is_set():
            # what a hub that no longer leads read after its term ended (woken from a
            # freeze, say) is served here at once, not left to wait for its next term
            own = await self.store.claim_all(self.consumer) > 0 or own
            for start in ("0", ">") if own else (">",):
                block_ms = None if start == "0" else 500
                queued = await self.store.read(self.consumer, start, BATCH, block_ms)
                if start == "0":
                    own = len(queued) == BATCH
                    if queued:
                        queued = await self._answer_served(queued)
                        queued = await self._drop_failing(queued)
                # a batch is served concurrently: its engine steps share fenced writes, and
                # its answers go back in one round trip
                if queued:
                    requests = [_parsed(q) for q in queued]
                    answers = await self._serve_once(queued, requests)
                    filed = [
                        r.id for r in requests
                        if isinstance(r, Request) and self.handlers.files(r.command)
                    ]  # fmt: skip
                    await self._fenced()
                    await self.store.answer([q.entry_id for q in queued], answers, filed)

    async def _serve_once(
        self, queued: list[QueuedCommand], requests: list[Request | str]
    ) -> list[Answered]:
        """Each command of the batch served once, concurrently (their engine steps share
        fenced writes): a copy of one, in this batch or served lately by this server, gets
        the first's answer. A copy is one XADD sent again after its reply was lost, which
        redis-py does once on one server and up to ten times on a cluster."""
        firsts: dict[str, int] = {}
        todo = [
            i for i, r in enumerate(requests)
            if not isinstance(r, Request)
            or (r.id not in self._recent and firsts.setdefault(r.id, i) == i)
        ]  # fmt: skip
        if self.handlers.before is not None:
            commands = [r.command for i in todo if isinstance(r := requests[i], Request)]
            await self.handlers.before(commands)
        served = await asyncio.gather(*(self._serve(queued[i], requests[i]) for i in todo))
        by_index = dict(zip(todo, served, strict=True))
        for i, answered in by_index.items():
            if isinstance(requests[i], Request):  # what did not parse has no id to repeat
                self._recent[answered[0]] = answered
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)
        out: list[Answered] = []
        for i, r in enumerate(requests):
            if i in by_index:
                out.append(by_index[i])
            elif isinstance(r, Request):  # a copy (whatever is no request is served)
                out.append(self._recent[r.id])
        if len(todo) < len(requests):
            log.warning("commands: %d copies of commands served once", len(requests) - len(todo))
        return out

    async def _answer_served(self, queued: list[QueuedCommand]) -> list[QueuedCommand]:
        """Commands read again whose effect was written (the step filed their answer, then
        their server's answer was lost) are answered as they were the first time, and not
        served again: the rest are left to serve."""
        requests = {q.entry_id: r for q in queued if isinstance(r := _parsed(q), Request)}
        found = await self.store.served([r.id for r in requests.values()]) if requests else {}
        if not found:
            return queued
        again = [r for r in requests.values() if r.id in found]
        log.warning("%d command(s) served before their answers were lost: answered again "
                    "from the answers their steps filed", len(again))  # fmt: skip
        entry_ids = [e for e, r in requests.items() if r.id in found]
        answers = [(r.id, r.reply_to, found[r.id]) for r in again]
        await self.store.answer(entry_ids, answers, [r.id for r in again])
        return [q for q in queued if q.entry_id not in entry_ids]

    async def _drop_failing(self, queued: list[QueuedCommand]) -> list[QueuedCommand]:
        """Commands read again after their server died (or its term ended) serving them:
        past `max_tries` reads one is answered "failing" instead of served once more, so a
        command that ends every term it is served in cannot stop every leader in turn."""
        tries = await self.store.tries(self.consumer)
        failing = [q for q in queued if tries.get(q.entry_id, 0) > self.max_tries]
        if not failing:
            return queued
        answers: list[Answered] = []
        for q in failing:
            n = tries[q.entry_id] - 1
            log.error("command %s failed on %d tries: answered as failing", q.entry_id, n)
            detail = f"the command failed on {n} tries (the hub serving it stopped each time)"
            answers.append((*_asker(q.body), _refused(ErrorCode.FAILING, detail)))
        await self._fenced()
        await self.store.answer([q.entry_id for q in failing], answers)
        return [q for q in queued if q not in failing]

    async def _fenced(self) -> None:
        if self.fence is not None:
            await self.fence()

    async def _serve(self, queued: QueuedCommand, request: Request | str) -> Answered:
        """(command id, its asker's stream, answer) for one command (`request`: parsed, or
        why it did not)."""
        if isinstance(request, str):
            return *_asker(queued.body), _refused(ErrorCode.NOT_FOUND, request)
        handler = self.handlers.of(request.command)
        try:
            if handler is None:
                raise NotFound(f"unknown command {request.command.op!r}")
            reply = await handler(request.command, request.id)
            return request.id, request.reply_to, answer_of(reply)
        except StaleLeader:
            raise
        except NotFound as exc:
            answer = Answer(ok=False, error=ErrorCode.NOT_FOUND, detail=str(exc))
        except Conflict as exc:
            answer = Answer(ok=False, error=ErrorCode.CONFLICT, detail=str(exc))
        except OutOfMemory as exc:
            answer = Answer(ok=False, error=ErrorCode.OUT_OF_MEMORY, detail=str(exc))
        except TransportError as exc:  # Redis failed the write: the asker may try again
            answer = Answer(ok=False, error=ErrorCode.UNAVAILABLE, detail=str(exc))
        except CallboardError as exc:  # any other refusal
            answer = Answer(ok=False, error=ErrorCode.ENGINE, detail=str(exc))
        return request.id, request.reply_to, answer.model_dump_json().encode()


def _parsed(queued: QueuedCommand) -> Request | str:
    """The command read, or why it is none."""
    try:
        return Request.model_validate_json(queued.body)
    except ValidationError as exc:
        return f"unknown command: {exc.errors()[0]['msg']}"


def _refused(code: ErrorCode, detail: str) -> bytes:
    return Answer(ok=False, error=code, detail=detail).model_dump_json().encode()


def _asker(body: bytes) -> tuple[str, str | None]:
    """The id of a request that does not validate and its asker's stream, when it names
    them (so its asker hears)."""
    try:
        data = json.loads(body)
    except ValueError:
        return "", None
    if not isinstance(data, dict):
        return "", None
    found, asker = data.get("id"), data.get("reply_to")
    command_id = found if isinstance(found, str) else ""
    valid = isinstance(asker, str) and re.fullmatch(ASKER_PATTERN, asker) is not None
    return command_id, asker if valid else None
