"""The kit's stand-in for the hub: it writes an agent's inbox as the hub would, and finds the
agent's replies to what it sent; `Failed` says which behaviour went wrong and how."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from callboard.conformance.watch import OutWatch, Seen
from protocols.codec import Envelope, encode, make
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.payloads import AckStandby, CoordGo, CoordStandby, CoordWarning, Payload
from protocols.transport import Probe

GHOST = "conformance-ghost"  # the consumer that reads an entry and vanishes
GHOST_IDLE_MS = 24 * 3600 * 1000  # idle past any reasonable MIN_IDLE of a reclaim


class Failed(Exception):
    """A behaviour the protocol requires did not happen; the text says what came instead."""


@dataclass(frozen=True)
class Timing:
    """How long the kit waits for an answer, and watches for messages that must not come."""

    ack_timeout_s: float = 5.0
    go_timeout_s: float = 10.0
    settle_s: float = 1.0
    start_timeout_s: float = 30.0
    reclaim_timeout_s: float = 20.0
    standdown_execute_ms: int = 3000


@dataclass(frozen=True)
class Sent:
    """A message the kit put in the inbox, and the entry that holds it."""

    message: Envelope
    entry_id: str

    @property
    def cue_id(self) -> str:
        return str(getattr(self.message.payload, "cue_id", self.message.cue_id))


class Stage:
    def __init__(self, probe: Probe, keys: Keys, agent: str, watch: OutWatch, timing: Timing):
        self.probe = probe
        self.agent = agent
        self.inbox = keys.inbox(agent)
        self.watch = watch
        self.timing = timing

    # -- writing the inbox ----------------------------------------------------------------

    async def send(self, mt: T, payload: Payload, run_id: str, cue_id: str) -> Sent:
        message = make(mt, payload, run_id=run_id, cue_id=cue_id, target_agents=(self.agent,))
        return Sent(message, await self.probe.publish(self.inbox, message))

    async def resend(self, sent: Sent) -> Sent:
        """The same message again, byte for byte, in a new entry (a duplicate delivery)."""
        return Sent(sent.message, await self.probe.publish(self.inbox, encode(sent.message)))

    async def send_to_ghost(self, mt: T, payload: Payload, run_id: str, cue_id: str) -> Sent:
        """Put a message in the inbox as a replica that read it and died would leave it."""
        message = make(mt, payload, run_id=run_id, cue_id=cue_id, target_agents=(self.agent,))
        await self._all_delivered()
        entry_id = await self.probe.deliver_to_ghost(
            self.inbox, self.agent, GHOST, encode(message), idle_ms=GHOST_IDLE_MS
        )
        return Sent(message, entry_id)

    def warning(self, cue: str, action: dict[str, Any]) -> CoordWarning:
        return CoordWarning(cue_id=cue, target_agents=[self.agent], action=action)

    def standby(self, cue: str) -> CoordStandby:
        return CoordStandby(cue_id=cue, target_agents=[self.agent], ready_check=["ready?"])

    def go(self, cue: str, action: dict[str, Any]) -> CoordGo:
        return CoordGo(cue_id=cue, target_agents=[self.agent], action=action)

    async def call(self, cue: str, action: dict[str, Any]) -> str:
        """WARNING and STANDBY of a new run's cue, each answered; returns the run id."""
        run = new_id()
        warning = await self.send(T.COORD_WARNING, self.warning(cue, action), run, cue)
        await self.reply(warning, T.ACK_WARNING, self.timing.ack_timeout_s)
        standby = await self.send(T.COORD_STANDBY, self.standby(cue), run, cue)
        ack = await self.reply(standby, T.ACK_STANDBY, self.timing.ack_timeout_s)
        body = ack.body(AckStandby)
        if not body.ready:
            raise Failed(f"ack.standby not ready: {body.reason}")
        return run

    # -- reading the answers ------------------------------------------------------------

    def about(self, sent: Sent, mt: T | None = None, after: int = 0) -> list[Seen]:
        """What the agent wrote about the run and cue of `sent` (of type `mt`)."""
        run = sent.message.run_id

        def match(m: Envelope) -> bool:
            return (mt is None or m.message_type is mt) and m.run_id == run

        return self.watch.messages(match, after)

    async def reply(self, sent: Sent, mt: T, timeout_s: float) -> Seen:
        """The first `mt` in reply to `sent`, checked for its run, cue and attempt."""
        wanted = sent.message.message_id
        found = await self.watch.wait(
            lambda m: m.message_type is mt and m.in_reply_to == wanted, timeout_s
        )
        if not found:
            near = self.about(sent, mt)
            what = f"{sent.message.message_type.value} {wanted}"
            if near:
                got = near[0].msg.in_reply_to
                raise Failed(f"{mt.value} came with in_reply_to {got!r}, not the {what}")
            raise Failed(f"no {mt.value} in reply to the {what} within {timeout_s:g}s")
        seen = found[0]
        self.check_reply(sent, seen)
        return seen

    def check_reply(self, sent: Sent, seen: Seen) -> None:
        m = seen.msg
        problems = []
        if m.run_id != sent.message.run_id:
            problems.append(f"run_id {m.run_id!r}, not {sent.message.run_id!r}")
        if m.cue_id != sent.cue_id:
            problems.append(f"cue_id {m.cue_id!r}, not {sent.cue_id!r}")
        attempt = getattr(m.payload, "attempt", None)
        wanted = getattr(sent.message.payload, "attempt", 1)
        if attempt is not None and attempt != wanted:
            problems.append(f"attempt {attempt}, not {wanted}")
        if problems:
            raise Failed(f"{m.message_type.value} has {', '.join(problems)}")

    # -- the inbox's consumer group -----------------------------------------------------

    async def pending(self) -> list[tuple[str, str, int]]:
        return await self.probe.pending(self.inbox, self.agent)

    async def acknowledged(self, sent: Sent, timeout_s: float | None = None) -> None:
        """Wait until `sent`'s entry was delivered and is no longer pending, or fail."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timing.settle_s if timeout_s is None else timeout_s)
        while True:
            group = (await self.probe.groups(self.inbox)).get(self.agent, {})
            delivered = _id_key(group.get("last_delivered", "0-0")) >= _id_key(sent.entry_id)
            held = [p for p in await self.pending() if p[0] == sent.entry_id]
            if delivered and not held:
                return
            if loop.time() >= deadline:
                what = sent.message.message_type.value
                state = f"pending with {held[0][1]}" if held else "never read"
                raise Failed(f"the {what} entry {sent.entry_id} was not acknowledged ({state})")
            await asyncio.sleep(0.05)

    async def _all_delivered(self) -> None:
        """Wait until the agent has read every entry of its inbox (so a ghost read takes the
        new entry, not an older one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timing.ack_timeout_s
        while True:
            group = (await self.probe.groups(self.inbox)).get(self.agent, {})
            last = await self.probe.last_id(self.inbox)
            if _id_key(group.get("last_delivered", "0-0")) >= _id_key(last):
                return
            if loop.time() >= deadline:
                raise Failed(f"the agent left entries of its inbox unread (after {last})")
            await asyncio.sleep(0.05)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
