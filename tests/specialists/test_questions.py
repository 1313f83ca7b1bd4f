"""A specialist that asks an operator: status.blocked and an escalation while its work goes on,
the answer back as `task.input`, and values kept in done-markers for a replica that takes over."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

from protocols.codec import Envelope
from protocols.messages import MessageType
from protocols.payloads import CoordGo, TaskInput
from specialists import Cue, Specialist
from tests.helpers import eventually
from tests.specialists.conftest import AGENT, HubSide, Starter

pytestmark = pytest.mark.redis
M = MessageType


class Asker(Specialist):
    """Asks once per cue, waits for the answer, completes with it."""

    kind = "asker"
    answers: ClassVar[dict[str, asyncio.Future[str]]] = {}
    seen: ClassVar[list[tuple[str, str | None, str]]] = []

    async def execute(self, cue: Cue) -> dict[str, object]:
        before = await cue.recall("ticket")
        await cue.remember("ticket", f"ticket-{cue.cue_id}")
        self.seen.append((cue.cue_id, before, cue.description))
        answer = self.answers.setdefault(cue.cue_id, asyncio.get_running_loop().create_future())
        await cue.blocked("waiting for an operator: which colour?")
        await cue.escalate(f"input_required:ticket-{cue.cue_id}", "which colour?")
        return {"answer": await asyncio.wait_for(answer, 10), "ticket": await cue.recall("ticket")}

    async def on_input(self, answer: TaskInput, message: Envelope) -> None:
        self.answers[answer.cue_id].set_result(answer.answer)


async def test_blocked_escalation_answer_and_remembered_values(
    start: Starter, hub: HubSide
) -> None:
    Asker.answers, Asker.seen = {}, []
    await start(Asker)
    payload = CoordGo(cue_id="CUE-1", target_agents=[AGENT], description="Pick a colour")
    go = await hub.send(M.COORD_GO, payload)
    [blocked] = await hub.wait(M.STATUS_BLOCKED, "CUE-1")
    [asked] = await hub.wait(M.ESCALATION_ERROR, "CUE-1")
    assert blocked.in_reply_to == go.message_id == asked.in_reply_to
    assert blocked.payload.reason == "waiting for an operator: which colour?"
    assert (asked.payload.cause, asked.payload.detail) == (
        "input_required:ticket-CUE-1",
        "which colour?",
    )
    assert Asker.seen == [("CUE-1", None, "Pick a colour")]
    assert await hub.of(M.STATUS_COMPLETED) == []
    answer = TaskInput(
        cue_id="CUE-1", escalation_id="e-1", cause=asked.payload.cause, answer="teal"
    )
    await hub.send(M.TASK_INPUT, answer)
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    assert done.payload.result == {"answer": "teal", "ticket": "ticket-CUE-1"}
    await eventually(lambda: _none_pending(hub), message="GO and task.input acked")


async def test_a_failing_on_input_asks_the_hub_to_dead_letter_the_answer(
    start: Starter, hub: HubSide
) -> None:
    Asker.answers, Asker.seen = {}, []
    await start(Asker)
    stray = TaskInput(cue_id="CUE-9", escalation_id="e-2", answer="nobody asked")
    await hub.send(M.TASK_INPUT, stray)  # no question open for CUE-9: on_input raises

    async def rejected() -> list[object]:
        return list(await hub.rejected())

    [letter] = await eventually(rejected, message="status.rejected")
    assert "on_input failed: KeyError" in letter.reason
    await eventually(lambda: _none_pending(hub), message="the answer acked")


async def _none_pending(hub: HubSide) -> bool:
    return await hub.pending() == 0
