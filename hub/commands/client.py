"""Asking the leading engine: queue a command, block on its answer, raise its error.

With several engine partitions a command goes to the partition of the run it names (an
escalation's: its run's; about no run: partition 0); pause and resume go to every one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from hub.commands.models import Answer, Broadcast, Command, ErrorCode, R, Request, Resolve
from hub.store.commands import CommandStore
from protocols.errors import TransportError
from protocols.keys import partition_of
from protocols.messages import MessageType

_EVERY_PARTITION = frozenset(
    {MessageType.BROADCAST_PAUSE.value, MessageType.BROADCAST_RESUME.value}
)


def to_every_partition(command: Command[R]) -> bool:
    """Is `command` sent to (and served by) every partition, not only one?"""
    return isinstance(command, Broadcast) and command.message_type in _EVERY_PARTITION


class LeaderUnavailable(TransportError):
    """No hub leads the engine right now (or it did not answer in time)."""


async def _no_escalations(esc_id: str) -> str | None:
    return None


class CommandClient:
    def __init__(
        self,
        stores: CommandStore | Sequence[CommandStore],
        escalation_run: Callable[[str], Awaitable[str | None]] = _no_escalations,
    ) -> None:
        """`stores`: each partition's command stream, in partition order; `escalation_run`:
        the run an escalation is about (where its Resolve goes)."""
        self.stores = [stores] if isinstance(stores, CommandStore) else list(stores)
        self.escalation_run = escalation_run

    @property
    def store(self) -> CommandStore:
        return self.stores[0]

    async def call(
        self, command: Command[R], timeout_s: float = 10.0, only: Sequence[int] | None = None
    ) -> R:
        """Send `command` and wait for its reply; its refusal raises NotFound, Conflict or
        EngineError, no leader in time raises LeaderUnavailable. Sent to several
        partitions (`only` those of them, when given), every one must answer; the first's
        reply is returned."""
        partitions = await self.partitions_of(command)
        if only is not None:
            partitions = [p for p in partitions if p in only]
        sent = [(p, await self.send(command, p)) for p in partitions]
        replies = [await self.answer(command, command_id, timeout_s, p) for p, command_id in sent]
        return replies[0]

    async def partitions_of(self, command: Command[R]) -> list[int]:
        """Where `command` is served."""
        count = len(self.stores)
        if count == 1:
            return [0]
        if isinstance(command, Broadcast):
            return list(range(count)) if to_every_partition(command) else [0]
        run_id = await self.escalation_run(command.id) if isinstance(command, Resolve) else None
        run_id = run_id or getattr(command, "run_id", None)
        return [partition_of(run_id, count) if isinstance(run_id, str) else 0]

    async def send(self, command: Command[R], partition: int = 0) -> str:
        """Queue a command for the leader; its answer waits for `answer` (REPLY_TTL_S)."""
        store = self.stores[partition]
        request = Request.model_validate({"command": command, "reply_to": store.answers.asker})
        store.answers.expect(request.id)
        try:
            await store.push(request.model_dump_json().encode())
        except BaseException:
            store.answers.forget(request.id)
            raise
        return request.id

    async def answer(
        self, command: Command[R], command_id: str, timeout_s: float = 10.0, partition: int = 0
    ) -> R:
        store = self.stores[partition]
        raw = await store.wait_answer(command_id, timeout_s)
        if raw is None:
            op = type(command).__name__
            where = f" of partition {partition}" if len(self.stores) > 1 else ""
            said = f"no leading hub{where} answered {op} within {timeout_s:g}s"
            refusal = await store.writes_refused()  # the likely why, told as its class
            if refusal is not None:
                raise type(refusal)(f"{said}: {refusal}")
            raise LeaderUnavailable(said)
        answer = Answer.model_validate_json(raw)
        if answer.ok:
            return command.read_reply(answer.result)
        raise (answer.error or ErrorCode.ENGINE).error(answer.detail)
