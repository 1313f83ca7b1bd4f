"""A specialist written against PROTOCOL.md with redis-py and json only (no SDK, no codec),
with one deliberate flaw chosen on the command line, so tests can show the kit reports it.

    python -m tests.conformance.raw_agent --agent NAME [--flaw FLAW]

Flaws: none, no-ack-warning, never-acks, double-execution, no-dedup, wrong-reply-id,
ignores-standdown, no-reclaim, always-ready, no-context, spoofs-sender, no-contract.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from protocols.keys import Keys

FLAWS = (
    "none", "no-ack-warning", "never-acks", "double-execution", "no-dedup", "wrong-reply-id",
    "ignores-standdown", "no-reclaim", "always-ready", "no-context", "spoofs-sender",
    "no-contract",
)  # fmt: skip


class RawAgent:
    def __init__(self, agent: str, flaw: str) -> None:
        self.agent, self.flaw = agent, flaw
        self.replica = f"raw-{os.getpid()}"
        keys = Keys(os.environ.get("CALLBOARD_PREFIX", "cb:"))
        self.inbox, self.out = keys.inbox(agent), keys.out(agent)
        self.r = aioredis.from_url(os.environ["REDIS_URL"])
        self.actions: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.seen: set[tuple[Any, ...]] = set()
        self.work: dict[tuple[Any, ...], asyncio.Task[None]] = {}
        self.min_idle_ms = int(os.environ.get("CALLBOARD_MIN_IDLE_MS", "30000"))

    def message(self, mt: str, payload: dict[str, Any], to: dict[str, Any] | None) -> bytes:
        reply_to = to["message_id"] if to else None
        if self.flaw == "wrong-reply-id" and reply_to:
            reply_to = str(uuid.uuid4())
        return json.dumps({
            "message_id": str(uuid.uuid4()), "message_type": mt,
            "from_agent": "someone-else" if self.flaw == "spoofs-sender" else self.agent,
            "target_agents": [], "run_id": to["run_id"] if to else None,
            "cue_id": to["cue_id"] if to else None, "in_reply_to": reply_to,
            "sent_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "payload": payload,
            "v": 1,
        }).encode()  # fmt: skip

    async def write(self, messages: list[bytes], entry_id: str | None) -> None:
        """The messages and the XACK of the entry, in one MULTI."""
        async with self.r.pipeline(transaction=True) as pipe:
            for m in messages:
                pipe.xadd(self.out, {"m": m})
            if entry_id and self.flaw != "never-acks":
                pipe.xack(self.inbox, self.agent, entry_id)
            await pipe.execute()

    async def handle(self, entry_id: str, fields: dict[bytes, bytes]) -> None:
        m = json.loads(fields[b"m"])
        mt, p = m["message_type"], m["payload"]
        key = (m["run_id"], p.get("cue_id"), p.get("attempt", 1))
        if mt in ("coord.warning", "coord.standby", "coord.go", "task.assign"):
            phase = "work" if mt in ("coord.go", "task.assign") else mt
            if (phase, *key) in self.seen and self.flaw != "no-dedup":
                await self.write([], entry_id)
                return
            self.seen.add((phase, *key))
        attempt = {"attempt": p.get("attempt", 1)}
        if mt == "coord.warning":
            self.actions[key] = p.get("action", {})
            skip = self.flaw == "no-ack-warning"
            await self.write([] if skip else [self.message("ack.warning", attempt, m)], entry_id)
        elif mt == "coord.standby":
            action = self.actions.get(key, {})
            ready = action.get("ready", True) is not False or self.flaw == "always-ready"
            reason = "" if ready else str(action.get("ready_reason") or "not ready")
            ack = self.message("ack.standby", {**attempt, "ready": ready, "reason": reason}, m)
            await self.write([ack], entry_id)
        elif mt in ("coord.go", "task.assign"):
            self.work[key] = asyncio.create_task(self.execute(entry_id, m, key))
        elif mt == "coord.standdown":
            for k, task in list(self.work.items()):
                if k[:2] == key[:2] and self.flaw != "ignores-standdown":
                    task.cancel()
            await self.write([], entry_id)
        else:
            await self.write([], entry_id)

    async def execute(self, entry_id: str, m: dict[str, Any], key: tuple[Any, ...]) -> None:
        p = m["payload"]
        action, attempt = p.get("action", {}), {"attempt": p.get("attempt", 1)}
        try:
            await asyncio.sleep(float(action.get("execute_ms", 0)) / 1000)
        except asyncio.CancelledError:
            failed = {**attempt, "error": "stood down", "replica": self.replica}
            await self.write([self.message("status.failed", failed, m)], entry_id)
            return
        finally:
            self.work.pop(key, None)
        if action.get("fail") is True:
            failed = {**attempt, "error": "scripted failure", "replica": self.replica}
            await self.write([self.message("status.failed", failed, m)], entry_id)
            return
        out = []
        if self.flaw != "no-context":
            for k, v in (action.get("context") or {}).items():
                out.append(self.message("task.context", {"key": k, "value": v}, m))
        if action.get("handoff"):
            h = action["handoff"]
            body = {"from_agent": self.agent, "to_agent": h["to"], "task_id": p["cue_id"],
                    **attempt, "handoff_context": dict(h.get("context") or {})}  # fmt: skip
            out.append(self.message("task.handoff", body, m))
        done = {**attempt, "result": action.get("result", {}), "replica": self.replica}
        out.append(self.message("status.completed", done, m))
        if self.flaw == "double-execution":
            out.append(self.message("status.completed", done, m))
        await self.write(out, entry_id)

    async def run(self) -> None:
        try:
            await self.r.xgroup_create(self.inbox, self.agent, "0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        online: dict[str, Any] = {"replica": self.replica, "kind": f"raw-{self.flaw}"}
        if self.flaw != "no-contract":
            online["contract"] = {"provides": ["raw_output"]}
        await self.write([self.message("status.online", online, None)], None)
        reclaiming = asyncio.create_task(self.reclaim()) if self.flaw != "no-reclaim" else None
        while True:
            got = await self.r.xreadgroup(
                self.agent, self.replica, {self.inbox: ">"}, count=10, block=200
            )
            for _, entries in got or []:
                for entry_id, fields in entries:
                    await self.handle(entry_id.decode(), fields)
            if reclaiming is not None and reclaiming.done():
                reclaiming.result()  # a crashed reclaim loop ends the agent, loudly

    async def reclaim(self) -> None:
        while True:
            _, claimed, *_ = await self.r.xautoclaim(
                self.inbox, self.agent, self.replica, self.min_idle_ms, "0-0", count=10
            )
            for entry_id, fields in claimed:
                await self.handle(entry_id.decode(), fields)
            await asyncio.sleep(0.2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", required=True)
    parser.add_argument("--flaw", choices=FLAWS, default="none")
    args = parser.parse_args()
    asyncio.run(RawAgent(args.agent, args.flaw).run())
