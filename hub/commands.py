"""Operator commands: any hub's API asks the leading hub's engine, and waits for its answer.

A command is an entry on the commands stream (read by the leader in a consumer group);
the answer comes back on a short-lived list the asking hub blocks on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from protocols.errors import CallboardError, Conflict, EngineError, NotFound, TransportError
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.transport import Redis, is_group_missing, is_transient

log = logging.getLogger(__name__)

GROUP = "engine"
REPLY_TTL_S = 60
RETRY_S = 0.5


_ERRORS: dict[str, type[EngineError]] = {"not_found": NotFound, "conflict": Conflict}


class LeaderUnavailable(TransportError):
    """No hub leads the engine right now (or it did not answer in time)."""


class CommandClient:
    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    async def call(self, op: str, timeout_s: float = 10.0, **args: Any) -> Any:
        return await self.answer(op, await self.send(op, **args), timeout_s)

    async def send(self, op: str, **args: Any) -> str:
        """Queue a command for the leader; its answer waits for `answer` (REPLY_TTL_S)."""
        command_id = new_id()
        await self.client.xadd(
            self.keys.commands(), {"id": command_id, "op": op, "args": json.dumps(args)}
        )
        return command_id

    async def answer(self, op: str, command_id: str, timeout_s: float = 10.0) -> Any:
        reply = await self.client.blpop([self.keys.reply(command_id)], timeout=timeout_s)
        if reply is None:
            raise LeaderUnavailable(f"no leading hub answered {op!r} within {timeout_s:g}s")
        answer = json.loads(reply[1])
        if answer["ok"]:
            return answer["result"]
        raise _ERRORS.get(answer["error"], EngineError)(answer["detail"])


Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class CommandServer:
    def __init__(
        self, client: Redis, keys: Keys, consumer: str, handlers: dict[str, Handler]
    ) -> None:
        self.client = client
        self.keys = keys
        self.consumer = consumer
        self.handlers = handlers

    async def run(self, stop: asyncio.Event) -> None:
        ready = False
        while not stop.is_set():
            try:
                if not ready:
                    await self._ensure_group()
                    ready = True
                await self._read(stop)
            except Exception as exc:
                # A Redis restart must not cost the hub its leadership: wait and read again
                # (recreating the group if Redis came back empty). Anything else is a bug.
                lost_group = is_group_missing(exc)
                if not (lost_group or is_transient(exc)):
                    raise
                ready = ready and not lost_group
                log.warning("commands: %s; retrying", exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RETRY_S)

    async def _ensure_group(self) -> None:
        try:
            await self.client.xgroup_create(self.keys.commands(), GROUP, id="$", mkstream=True)
        except Exception as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _read(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            # own pending first (a restarted leader finishes what it had read), then new ones
            for start in ("0", ">"):
                rows = await self.client.xreadgroup(
                    GROUP, self.consumer, {self.keys.commands(): start}, count=100,
                    block=None if start == "0" else 500,
                )  # fmt: skip
                # a batch is served concurrently: its engine steps share fenced writes, and
                # its answers go back in one round trip
                entries = [entry for _, batch in rows or [] for entry in batch]
                if entries:
                    answers = await asyncio.gather(*(self._serve(f) for _, f in entries))
                    await self._answer([i for i, _ in entries], answers)

    async def _answer(self, entry_ids: list[bytes], answers: list[tuple[str, Any]]) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for command_id, answer in answers:
                pipe.rpush(self.keys.reply(command_id), json.dumps(answer, default=str))
                pipe.expire(self.keys.reply(command_id), REPLY_TTL_S)
            pipe.xack(self.keys.commands(), GROUP, *entry_ids)
            pipe.xdel(self.keys.commands(), *entry_ids)
            await pipe.execute()

    async def _serve(self, fields: dict[bytes, bytes]) -> tuple[str, Any]:
        """(command id, answer) for one command."""
        command_id = fields.get(b"id", b"").decode()
        op = fields.get(b"op", b"").decode()
        try:
            args = json.loads(fields.get(b"args", b"{}"))
            handler = self.handlers.get(op)
            if handler is None:
                raise NotFound(f"unknown command {op!r}")
            answer = {"ok": True, "result": await handler(args)}
        except NotFound as exc:
            answer = {"ok": False, "error": "not_found", "detail": str(exc)}
        except Conflict as exc:
            answer = {"ok": False, "error": "conflict", "detail": str(exc)}
        except CallboardError as exc:
            if type(exc).__name__ == "StaleLeader":
                raise
            answer = {"ok": False, "error": "engine", "detail": str(exc)}
        return command_id, answer
