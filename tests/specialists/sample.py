"""Specialists written against the SDK for the tests (also loadable as `module:Class`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

from protocols.codec import Envelope
from protocols.payloads import BroadcastNotice, TaskHandoff, TaskInput
from specialists import Cue, Entry, Handoff, Reject, Result, Retry, Specialist


class Scripted(Specialist):
    """Records what it is asked; its action steers Retry, Reject, readiness and results."""

    kind = "scripted"
    calls: ClassVar[list[tuple[str, str]]] = []
    running: ClassVar[int] = 0
    most_running: ClassVar[int] = 0
    handoffs: ClassVar[list[TaskHandoff]] = []
    notices: ClassVar[list[str]] = []
    stood_down: ClassVar[list[str]] = []
    release: ClassVar[asyncio.Event | None] = None

    @classmethod
    def reset(cls) -> None:
        cls.calls, cls.handoffs, cls.notices, cls.stood_down = [], [], [], []
        cls.running = cls.most_running = 0
        cls.release = asyncio.Event()

    async def prepare(self, cue: Cue) -> None:
        self.calls.append(("prepare", cue.cue_id))
        if cue.action.get("prepare_fails"):
            raise RuntimeError("no disk")
        await asyncio.sleep(cue.action.get("prepare_ms", 0) / 1000)
        cue.state["prepared"] = True

    async def ready(self, cue: Cue) -> bool | tuple[bool, str]:
        self.calls.append(("ready", cue.cue_id))
        if cue.action.get("ready_hangs"):
            await asyncio.Event().wait()  # a check that never returns
        if "ready" in cue.action:
            reason = str(cue.action.get("reason", "")) * cue.action.get("reason_times", 1)
            return bool(cue.action["ready"]), reason
        return bool(cue.state.get("prepared"))

    async def execute(self, cue: Cue) -> Result | dict[str, Any]:
        self.calls.append(("execute", cue.cue_id))
        type(self).running += 1
        type(self).most_running = max(self.most_running, self.running)
        try:
            action = cue.action
            if action.get("block") and self.release is not None:
                await self.release.wait()
            tries = sum(1 for kind, cid in self.calls if (kind, cid) == ("execute", cue.cue_id))
            if tries <= action.get("retries", 0):
                raise Retry(delay_s=0.05, reason=f"try {tries}")
            if "reject" in action:
                raise Reject(action["reject"])
            if action.get("boom"):
                raise ValueError("boom")
            if action.get("plain"):
                return {"plain": True}
            cue.put_context("seen_context", dict(cue.context))
            return Result(
                result={"tries": tries},
                context={"k1": 1, "k2": Entry("two", tags=["t"], metadata={"m": 1})},
                handoff=Handoff(to="agent-b", context={"impl": "x"}, work_completed=["done"]),
            )
        finally:
            type(self).running -= 1

    async def standdown(self, cue: Cue, reason: str) -> None:
        self.stood_down.append(cue.cue_id)
        if reason == "hang":
            await asyncio.Event().wait()  # a hook that never returns

    async def on_handoff(self, handoff: TaskHandoff, message: Envelope) -> None:
        self.handoffs.append(handoff)
        if handoff.task_id == "hang":
            await asyncio.Event().wait()

    async def on_input(self, answer: TaskInput, message: Envelope) -> None:
        if answer.answer == "hang":
            await asyncio.Event().wait()

    async def on_broadcast(self, notice: BroadcastNotice, message: Envelope) -> None:
        self.notices.append(notice.text)
        if notice.text == "hang" and self.release is not None:
            await self.release.wait()  # a hook that does not return until released


class SideEffect(Specialist):
    """Appends one line to `action.path` at most once per cue attempt across replicas; the
    first replica to do it then hangs for `action.hang_ms` (so a test can kill it there)."""

    kind = "side-effect"

    async def execute(self, cue: Cue) -> dict[str, Any]:
        path = Path(cue.action["path"])
        async with cue.once("append") as first:
            if first:
                await asyncio.to_thread(_append, path, f"{self.replica}\n")
        if first:
            await asyncio.sleep(cue.action.get("hang_ms", 0) / 1000)
        return {"wrote": first, "replica": self.replica}


def _append(path: Path, line: str) -> None:
    with path.open("a") as f:
        f.write(line)
