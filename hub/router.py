"""Hub routing: every agent's `out` stream in one consumer group, routed by channel.

The sender is the stream key, never the body: `from_agent` is stamped here, and a body
naming another sender is a protocol violation. Bad entries (not JSON, unknown type, bad
payload, oversized, a type a specialist may not send) go to the dead-letter stream with
their reason and raise one `escalation.protocol_violation`; routing goes on. A batch is
acknowledged only after everything it caused has been written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from functools import partial
from typing import Any

from pydantic_core import to_json

from hub.engine import inputs
from hub.engine.core import Engine
from hub.engine.driver import Driver
from hub.metrics import Metrics, _cause_label
from hub.registry import Registry
from protocols import payloads as p
from protocols.codec import Envelope, encode
from protocols.keys import HUB_GROUP, STREAM_FIELD
from protocols.messages import SPECIALIST_SENDS
from protocols.messages import MessageType as T
from protocols.settings import Settings
from protocols.states import Severity
from protocols.transport import Delivery, Transport, ack_commands

log = logging.getLogger(__name__)

_REGISTRY_TYPES = frozenset({T.STATUS_ONLINE, T.STATUS_OFFLINE, T.STATUS_REPORT})
# Routed and audited, with no effect yet: copying the named inbox entry to the dead-letter
# stream is the hub's next step (PROTOCOL.md, "status.rejected"); never an escalation.
_AUDITED_ONLY = frozenset({T.STATUS_REJECTED})
DISCOVER_EVERY_S = 1.0
SEEN_CAPACITY = 200_000


class Router:
    def __init__(
        self,
        transport: Transport,
        settings: Settings,
        driver: Driver,
        registry: Registry,
        metrics: Metrics,
        consumer: str,
    ) -> None:
        self.transport = transport
        self.settings = settings
        self.keys = settings.keys
        self.driver = driver
        self.registry = registry
        self.metrics = metrics
        self.consumer = consumer
        self.streams: list[str] = []
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._last_discover = 0.0
        self._last_claim = 0.0

    async def discover(self) -> None:
        """Find every agent's out stream (new agents appear at any time)."""
        found = set(self.streams)
        for name in await self.transport.scan_keys(self.keys.out_pattern):
            if name not in found and self.keys.agent_of_out(name):
                await self.transport.ensure_group(name, HUB_GROUP, "0")
                found.add(name)
        self.streams = sorted(found)
        self._last_discover = time.monotonic()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if time.monotonic() - self._last_discover > DISCOVER_EVERY_S:
                await self.discover()
                await self.transport.trim(self.keys.audit, maxlen=self.settings.audit_maxlen)
            if not self.streams:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
                continue
            if time.monotonic() - self._last_claim > self.settings.claim_interval_ms / 1000:
                await self._reclaim()
            batch = await self.transport.read_group(
                self.streams, HUB_GROUP, self.consumer,
                count=self.settings.read_count, block_ms=min(self.settings.block_ms, 500),
            )  # fmt: skip
            if batch:
                await self.process(batch)

    async def _reclaim(self) -> None:
        """Entries a dead hub read but never acknowledged move to this one."""
        self._last_claim = time.monotonic()
        for stream in self.streams:
            claimed = await self.transport.reclaim(
                stream, HUB_GROUP, self.consumer, min_idle_ms=self.settings.min_idle_ms
            )
            if claimed:
                await self.process(claimed)

    async def process(self, batch: Sequence[Delivery]) -> None:
        engine_msgs: list[Envelope] = []
        bad: list[tuple[Delivery, str, str]] = []  # (delivery, cause, detail)
        forwards: list[tuple[str, Envelope | bytes]] = []
        routed: list[Envelope] = []
        registry_changed: set[str] = set()
        for d in batch:
            agent = self.keys.agent_of_out(d.stream) or "?"
            msg = d.message
            if msg is None:
                reason = d.error.reason if d.error else "undecodable entry"
                bad.append((d, "bad_message", f"{agent}: {reason}"))
                continue
            if msg.from_agent and msg.from_agent != agent:
                bad.append(
                    (d, "spoofed_sender", f"body says {msg.from_agent!r}, stream is {agent!r}")
                )
                continue
            if msg.message_type not in SPECIALIST_SENDS:
                bad.append((d, "not_allowed", f"{agent} may not send {msg.message_type.value}"))
                continue
            if msg.message_id in self._seen:
                continue  # a message seen twice is handled once
            self._remember(msg.message_id)
            if msg.message_type is T.TASK_HANDOFF and msg.run_id is None:
                forward = self._runless_handoff(msg, agent)
                if forward is None:
                    bad.append(
                        (d, "handoff_rejected", "handoff outside a run misses required keys")
                    )
                    continue
                stream, out = forward
                routed.append(out)
                forwards.append((stream, d.raw if out is msg else out))  # unchanged: as read
                continue
            if msg.from_agent != agent:
                msg = msg.model_copy(update={"from_agent": agent})
            routed.append(msg)
            if msg.message_type in _AUDITED_ONLY:
                continue
            if msg.message_type in _REGISTRY_TYPES:
                if self.registry.apply(msg):
                    registry_changed.add(agent)
            else:
                engine_msgs.append(msg)
        if routed:
            forwards.append((self.keys.audit, _audit_entry(routed)))
            for mt, n in Counter(m.message_type for m in routed).items():
                self.metrics.routed.labels(mt.value).inc(n)
        for d, cause, detail in bad:
            self.metrics.dead_letters.labels(cause).inc()
            self.metrics.violations.labels(_cause_label(cause)).inc()
            await self.transport.dead_letter(d, f"{cause}: {detail}", group=HUB_GROUP)
        await self.registry.save(registry_changed)
        dead = {id(d) for d, _, _ in bad}  # dead_letter acknowledged those already
        done = [d for d in batch if id(d) not in dead]
        if engine_msgs or bad:
            # one fenced write: the engine's effects, the forwards, the audit and the XACKs
            raw = [*_xadds(forwards), *ack_commands(done, HUB_GROUP)]
            step = partial(self._apply, messages=engine_msgs, bad=bad, raw=raw)
            only_audit = all(stream == self.keys.audit for stream, _ in forwards)
            await self.driver.step(step, quiet_may_wait=only_audit and not bad)
        else:
            await self.transport.publish_many(forwards, ack=done, group=HUB_GROUP)

    def _apply(
        self,
        engine: Engine,
        messages: list[Envelope],
        bad: list[tuple[Delivery, str, str]],
        raw: list[list[Any]],
    ) -> None:
        engine.write_with_step(raw)
        for msg in messages:
            if msg.message_type in inputs.ENGINE_TYPES:
                inputs.handle(engine, msg)
            else:
                inputs.specialist_escalation(engine, msg)
        for d, cause, detail in bad:
            sender = self.keys.agent_of_out(d.stream) or "?"
            payload = p.EscalationProtocolViolation(
                severity=Severity.MEDIUM, cause=f"{cause}:{sender}", detail=detail, reason=cause,
                stream=d.stream, entry_id=d.entry_id, sender=sender,
            )  # fmt: skip
            engine.escalate(None, None, T.ESCALATION_PROTOCOL_VIOLATION, payload)

    def _runless_handoff(self, msg: Envelope, agent: str) -> tuple[str, Envelope] | None:
        """A handoff outside any run: checked against the registry's contracts, then forwarded."""
        body = msg.body(p.TaskHandoff)
        problem, _ = inputs.handoff_problem(
            agent, self.registry.contract_of(agent),
            body.to_agent, self.registry.contract_of(body.to_agent),
            body.handoff_context.provided_keys(),
        )  # fmt: skip
        if problem or body.from_agent != agent:
            return None
        stamped = {"from_agent": agent, "target_agents": (body.to_agent,)}
        if msg.from_agent == agent and msg.target_agents == stamped["target_agents"]:
            return (self.keys.inbox(body.to_agent), msg)
        forwarded = msg.model_copy(update=stamped)
        return (self.keys.inbox(body.to_agent), forwarded)

    def _remember(self, message_id: str) -> None:
        self._seen[message_id] = None
        if len(self._seen) > SEEN_CAPACITY:
            self._seen.popitem(last=False)


def _xadds(items: list[tuple[str, Envelope | bytes]]) -> list[list[Any]]:
    return [
        ["XADD", stream, "*", STREAM_FIELD, m if isinstance(m, bytes) else encode(m)]
        for stream, m in items
    ]


def _audit_entry(messages: list[Envelope]) -> bytes:
    """One audit entry per routed batch, listing every message in it (id, type, who, run)."""
    return to_json([
        {"id": m.message_id, "type": m.message_type.value, "from": m.from_agent,
         "to": list(m.target_agents), "run": m.run_id, "cue": m.cue_id}
        for m in messages
    ])  # fmt: skip
