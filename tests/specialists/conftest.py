"""Fixtures that play the hub's part on streams, and run replicas in process or as processes."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from protocols.codec import Envelope, decode, make
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType
from protocols.payloads import (
    CoordGo,
    CoordStandby,
    CoordWarning,
    Payload,
)
from protocols.settings import Settings
from protocols.transport import Delivery, Transport
from specialists import Specialist
from tests.helpers import eventually
from tests.specialists.sample import Scripted

ROOT = Path(__file__).resolve().parents[2]
AGENT = "agent-a"
RUN = "run-1"


class HubSide:
    """Writes what the hub would write to one agent's inbox and reads its out stream."""

    def __init__(self, transport: Transport, keys: Keys, agent: str = AGENT) -> None:
        self.t = transport
        self.keys = keys
        self.agent = agent

    async def send(self, mt: MessageType, payload: Payload, **fields: Any) -> Envelope:
        fields.setdefault("run_id", RUN)
        fields.setdefault("cue_id", getattr(payload, "cue_id", None))
        fields.setdefault("target_agents", (self.agent,))
        message = make(mt, payload, **fields)
        await self.t.publish(self.keys.inbox(self.agent), message)
        return message

    async def warning(self, cue: str, attempt: int = 1, **action: Any) -> Envelope:
        payload = CoordWarning(
            cue_id=cue, target_agents=[self.agent], attempt=attempt, action=action
        )
        return await self.send(MessageType.COORD_WARNING, payload)

    async def standby(self, cue: str, attempt: int = 1) -> Envelope:
        payload = CoordStandby(cue_id=cue, target_agents=[self.agent], attempt=attempt)
        return await self.send(MessageType.COORD_STANDBY, payload)

    async def go(
        self, cue: str, attempt: int = 1, go_context: dict[str, Any] | None = None, **action: Any
    ) -> Envelope:
        payload = CoordGo(
            cue_id=cue,
            target_agents=[self.agent],
            attempt=attempt,
            action=action,
            context=go_context or {},
        )
        return await self.send(MessageType.COORD_GO, payload)

    async def broadcast(self, mt: MessageType, payload: Payload) -> None:
        await self.t.publish(self.keys.broadcast, make(mt, payload))

    async def out(self) -> list[Envelope]:
        """Everything the agent has written to its out stream, in order."""
        rows: Any = await self.t._client.xrange(self.keys.out(self.agent))
        return [decode(fields[STREAM_FIELD.encode()]) for _, fields in rows]

    async def of(self, mt: MessageType, cue: str | None = None) -> list[Envelope]:
        return [m for m in await self.out() if m.message_type == mt and cue in (None, m.cue_id)]

    async def wait(
        self, mt: MessageType, cue: str | None = None, n: int = 1, timeout_s: float = 5.0
    ) -> list[Envelope]:
        """Wait until at least `n` messages of `mt` (for `cue`) are out; return them all."""

        async def enough() -> list[Envelope]:
            found = await self.of(mt, cue)
            return found if len(found) >= n else []

        return await eventually(enough, timeout_s, message=f"{n} x {mt} for {cue}")

    async def pending(self) -> int:
        return await self.t.pending_count(self.keys.inbox(self.agent), self.agent)

    async def rejected(self, n: int = 1) -> list[Any]:
        """The `status.rejected` payloads the agent sent (it asks the hub to dead-letter
        those inbox entries; it may not write the dead-letter stream itself)."""
        found = await self.wait(MessageType.STATUS_REJECTED, n=n)
        assert await self.t.dead_letters() == []  # nothing written there by the agent
        return [m.payload for m in found]


class DeafTransport(Transport):
    """Once `deaf` is set its reads take nothing (another replica's XREADGROUP wins every
    race); what rides a read is still written. It counts those reads and its renewals."""

    deaf: asyncio.Event
    deaf_reads: int
    renewals: int

    async def read_group(
        self, streams: Sequence[str], group: str, consumer: str, **kw: Any
    ) -> list[Delivery]:
        if not self.deaf.is_set():
            return await super().read_group(streams, group, consumer, **kw)
        self.deaf_reads += 1
        with contextlib.suppress(TimeoutError):  # as a blocking read that got nothing
            await asyncio.wait_for(asyncio.Event().wait(), kw["block_ms"] / 1000)
        return await super().read_group([], group, consumer, **kw)

    async def renew(self, *args: Any) -> list[str]:
        renewed = await super().renew(*args)
        self.renewals += 1
        return renewed


@pytest.fixture
async def deaf(settings: Settings) -> AsyncIterator[DeafTransport]:
    """Set up before the `start` fixture, so closed after the replicas it started stop."""
    made = DeafTransport.from_url(settings.redis_url, settings.keys)
    made.deaf, made.deaf_reads, made.renewals = asyncio.Event(), 0, 0
    yield made
    await made.close()


@pytest.fixture
def fast(settings: Settings) -> Settings:
    """Short claim timings, so reclaim tests finish fast."""
    return settings.model_copy(update={"min_idle_ms": 300, "claim_interval_ms": 100})


@pytest.fixture
async def transport(settings: Settings) -> AsyncIterator[Transport]:
    t = Transport.from_url(settings.redis_url, settings.keys)
    yield t
    async for key in t._client.scan_iter(match=f"{settings.prefix}*", count=1000):
        await t._client.delete(key)
    await t.close()


@pytest.fixture
def hub(transport: Transport, keys: Keys) -> HubSide:
    return HubSide(transport, keys)


Starter = Callable[..., Any]


@pytest.fixture
async def start(settings: Settings, hub: HubSide) -> AsyncIterator[Starter]:
    """Run a Specialist in this event loop until it is online; stopped at teardown."""
    running: list[tuple[Specialist, asyncio.Task[None]]] = []

    async def _start(
        cls: type[Specialist], replica: str = "r1", settings_: Settings | None = None, **kw: Any
    ) -> Specialist:
        spec = cls(AGENT, replica, settings_ or settings, **kw)
        task = asyncio.create_task(spec.run())
        running.append((spec, task))

        async def online() -> bool:
            if task.done():
                task.result()  # raise what killed it
            return any(
                m.payload.replica == replica for m in await hub.of(MessageType.STATUS_ONLINE)
            )

        await eventually(online, message=f"{replica} online")
        return spec

    yield _start
    for spec, _ in running:
        spec.stop("test over")
    for _, task in running:
        await asyncio.wait_for(task, 10)


class Replica:
    """A specialist replica running as its own process (`python -m callboard.specialist_cmd`)."""

    def __init__(self, proc: subprocess.Popen[bytes], name: str) -> None:
        self.proc = proc
        self.name = name

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float = 15.0) -> int:
        return self.proc.wait(timeout_s)

    def output(self) -> str:
        if self.proc.poll() is None:
            return ""
        return (self.proc.stdout.read() if self.proc.stdout else b"").decode(errors="replace")


Spawner = Callable[..., Replica]


@pytest.fixture
def spawn(env: dict[str, str]) -> Iterator[Spawner]:
    """Start replicas as processes; any still running at teardown are killed."""
    procs: list[Replica] = []

    def _spawn(kind: str, replica: str, *args: str, **extra_env: str) -> Replica:
        argv = [
            sys.executable,
            "-m",
            "callboard.specialist_cmd",
            kind,
            "--agent",
            AGENT,
            "--replica",
            replica,
            *args,
        ]
        child_env = {**env, **extra_env, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        replica_ = Replica(proc, replica)
        procs.append(replica_)
        return replica_

    yield _spawn
    for r in procs:
        if r.proc.poll() is None:
            os.kill(r.proc.pid, signal.SIGKILL)
        r.proc.wait(10)
        if r.proc.stdout:
            r.proc.stdout.close()


@pytest.fixture
def scripted() -> Iterator[None]:
    """`Scripted` (tests.specialists.sample) fresh for the test, and let go after it."""
    Scripted.reset()
    yield
    if Scripted.release is not None:
        Scripted.release.set()
