"""Asking the leading engine: queue a command, block on its answer, raise its error."""

from __future__ import annotations

from hub.commands.models import Answer, Command, ErrorCode, R, Request
from hub.store.commands import CommandStore
from protocols.errors import TransportError


class LeaderUnavailable(TransportError):
    """No hub leads the engine right now (or it did not answer in time)."""


class CommandClient:
    def __init__(self, store: CommandStore) -> None:
        self.store = store

    async def call(self, command: Command[R], timeout_s: float = 10.0) -> R:
        """Send `command` and wait for its reply; its refusal raises NotFound, Conflict or
        EngineError, no leader in time raises LeaderUnavailable."""
        return await self.answer(command, await self.send(command), timeout_s)

    async def send(self, command: Command[R]) -> str:
        """Queue a command for the leader; its answer waits for `answer` (REPLY_TTL_S)."""
        request = Request.model_validate({"command": command})
        await self.store.push(request.model_dump_json().encode())
        return request.id

    async def answer(self, command: Command[R], command_id: str, timeout_s: float = 10.0) -> R:
        raw = await self.store.wait_answer(command_id, timeout_s)
        if raw is None:
            op = type(command).__name__
            said = f"no leading hub answered {op} within {timeout_s:g}s"
            refusal = await self.store.writes_refused()  # the likely why, told as its class
            if refusal is not None:
                raise type(refusal)(f"{said}: {refusal}")
            raise LeaderUnavailable(said)
        answer = Answer.model_validate_json(raw)
        if answer.ok:
            return command.read_reply(answer.result)
        raise (answer.error or ErrorCode.ENGINE).error(answer.detail)
