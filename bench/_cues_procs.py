"""The processes bench/cues.py starts: the hub, a host of echo specialists, and bare agents.

Each runs in its own spawned process until its `stop` event is set, so the hub, the
agents and the measuring process never share an event loop (2 cores: the bench process
itself mostly waits). Receive times are stamped where an entry comes off XREADGROUP,
before it is decoded, in both the callboard agents and the bare ones.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import logging
import os
import time
from functools import partial
from typing import Any

from protocols.messages import MessageType

TIMED_IN = frozenset({
    MessageType.COORD_WARNING, MessageType.COORD_STANDBY, MessageType.COORD_GO,
    MessageType.TASK_ASSIGN,
})  # fmt: skip
TIMED_OUT = frozenset({MessageType.ACK_WARNING, MessageType.ACK_STANDBY})
TIMED_OUT_VALUES = frozenset(mt.value for mt in TIMED_OUT)
BARE_GROUP = "bare"


def _quiet() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


async def _until(stop: Any) -> None:
    """Wait in a thread for a multiprocessing Event, so the loop keeps running."""
    await asyncio.to_thread(stop.wait)


# -- the hub --------------------------------------------------------------------------------


def _profiled(main: Any, profile: str | None) -> None:
    """Run main() on the loop a hub or specialist would (uvloop when installed, unless
    CALLBOARD_UVLOOP=0), under cProfile when `profile` names a file for the stats."""
    from protocols.process import run

    if profile is None:
        run(main())
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        run(main())
    finally:
        profiler.disable()
        os.makedirs(os.path.dirname(profile) or ".", exist_ok=True)
        profiler.dump_stats(profile)


def hub_process(
    url: str, prefix: str, early_warning: bool, profile: str | None, ready: Any, stop: Any
) -> None:
    """One hub (router, engine, commands) on `prefix`, as `callboard hub` runs it minus HTTP."""
    from hub.service import Hub, HubSettings
    from protocols.process import tune_gc

    _quiet()
    tune_gc()  # as `callboard hub` does

    async def main() -> None:
        settings = HubSettings(redis_url=url, prefix=prefix, early_warning=early_warning)
        hub = Hub(settings)
        stopping = asyncio.Event()
        running = asyncio.create_task(hub.run(stopping))
        await hub.leading.wait()
        ready.set()
        await _until(stop)
        stopping.set()
        await running
        await hub.close()

    _profiled(main, profile)


# -- callboard agents: echo specialists hosted in one process --------------------------------


def agents_process(
    url: str, prefix: str, agents: list[str], concurrency: int, profile: str | None,
    ready: Any, stop: Any, conn: Any,
) -> None:  # fmt: skip
    """Echo specialists for `agents`, one asyncio task each. When stopped, sends back
    [(run_id, message_type, agent, epoch_s)]: when each coord.* message came off the wire
    (before decoding) and when each ack was written (its write's reply read: on its own, or
    ahead of the agent's next read)."""
    from protocols.process import tune_gc
    from protocols.settings import Settings
    from protocols.transport import Transport, WriteAhead
    from specialists.builtin.echo import Echo

    _quiet()
    tune_gc()  # as Specialist.main does
    seen: list[tuple[str | None, str, str, float]] = []

    class TimedTransport(Transport):
        agent = ""

        def _delivery(self, stream: str, entry_id: Any, fields: Any, deliveries: int) -> Any:
            now = time.time()
            delivery = super()._delivery(stream, entry_id, fields, deliveries)
            m = delivery.message
            if m is not None and m.message_type in TIMED_IN:
                seen.append((m.run_id, m.message_type.value, self.agent, now))
            return delivery

        async def publish(self, stream: str, message: Any) -> str:
            entry_id = await super().publish(stream, message)
            self._sent([message])
            return entry_id

        async def publish_many(self, items: Any, **kw: Any) -> list[str]:
            ids = await super().publish_many(items, **kw)
            self._sent([m for _, m in items])
            return ids

        async def read_group(self, *args: Any, ahead: Any = None, **kw: Any) -> Any:
            if ahead is not None:  # replies that go in the read's round trip: stamped when told
                ahead = WriteAhead(ahead.commands, partial(self._told, ahead))
            return await super().read_group(*args, ahead=ahead, **kw)

        def _told(self, ahead: Any, outcome: Any) -> None:
            now = time.time()
            ahead.tell(outcome)
            if isinstance(outcome, BaseException):
                return
            for words in ahead.commands:
                if words[0] == "XADD":
                    m = json.loads(words[4])
                    if m["message_type"] in TIMED_OUT_VALUES:
                        seen.append((m["run_id"], m["message_type"], self.agent, now))

        def _sent(self, messages: list[Any]) -> None:
            now = time.time()
            for m in messages:
                if not isinstance(m, bytes) and m.message_type in TIMED_OUT:
                    seen.append((m.run_id, m.message_type.value, self.agent, now))

    async def main() -> None:
        settings = Settings(redis_url=url, prefix=prefix, block_ms=1_000)
        specs, transports = [], []
        for agent in agents:
            transport = TimedTransport.from_url(url, settings.keys)
            transport.agent = agent
            transports.append(transport)
            specs.append(Echo(agent, "bench", settings, None, concurrency, transport=transport))
        running = [asyncio.create_task(s.run()) for s in specs]
        ready.set()
        await _until(stop)
        for spec in specs:
            spec.stop("bench done")
        await asyncio.gather(*running, return_exceptions=True)
        for transport in transports:
            await transport._client.aclose()

    _profiled(main, profile)
    conn.send(seen)
    conn.close()


# -- raw agents: the least an agent of a barrier can do --------------------------------------

_RUN, _CUE, _MID = b"run-placeholder-0001", b"cue-placeholder-0001", b"mid-placeholder-0001"


def _templates(agent: str) -> dict[str, bytes]:
    """The answer to each phase, encoded once; run, cue and message id are filled in by
    replacing placeholders, so answering costs a json.loads and three bytes.replace."""
    from protocols import payloads as p
    from protocols.codec import encode, make

    def reply(mt: MessageType, payload: Any) -> bytes:
        msg = make(mt, payload, from_agent=agent, run_id=_RUN.decode(), cue_id=_CUE.decode(),
                   message_id=_MID.decode())  # fmt: skip
        return encode(msg)

    return {
        MessageType.COORD_WARNING.value: reply(MessageType.ACK_WARNING, p.AckWarning()),
        MessageType.COORD_STANDBY.value: reply(MessageType.ACK_STANDBY, p.AckStandby()),
        MessageType.COORD_GO.value: reply(MessageType.STATUS_COMPLETED, p.StatusCompleted()),
    }


def raw_agents_process(
    url: str, prefix: str, agents: list[str], shared: str | None, ready: Any, stop: Any, conn: Any
) -> None:
    """One task per agent: XREADGROUP its inbox, answer each phase at once (XADD + XACK in
    one round trip) to `shared` (the bare barrier) or to its own out stream (protocol
    agents of a hub run, which announce themselves first). Sends back the GO receive times
    as [(run_id, cue_id, agent, epoch_s)] when stopped."""
    from protocols import payloads as p
    from protocols.codec import encode, make
    from protocols.ids import new_id
    from protocols.keys import STREAM_FIELD, Keys
    from protocols.transport import connect

    _quiet()
    keys = Keys(prefix)
    go = MessageType.COORD_GO.value
    received: list[tuple[str, str, str, float]] = []

    async def agent(client: Any, name: str, done: asyncio.Event) -> None:
        inbox, answers, templates = keys.inbox(name), shared or keys.out(name), _templates(name)
        while not done.is_set():
            reply: Any = await client.xreadgroup(BARE_GROUP, "a", {inbox: ">"}, 10, 200)
            now = time.time()
            if not reply:
                continue
            entries = reply[0][1]
            async with client.pipeline(transaction=False) as pipe:
                for _, fields in entries:
                    body = json.loads(fields[STREAM_FIELD.encode()])
                    mt, run, cue = body["message_type"], body["run_id"], body["cue_id"]
                    if mt == go:
                        received.append((run, cue, name, now))
                    answer = templates[mt].replace(_RUN, run.encode()).replace(_CUE, cue.encode())
                    pipe.xadd(answers, {STREAM_FIELD: answer.replace(_MID, new_id().encode())})
                pipe.xack(inbox, BARE_GROUP, *[entry_id for entry_id, _ in entries])
                await pipe.execute()

    async def main() -> None:
        client = connect(url)
        for name in agents:
            await client.xgroup_create(keys.inbox(name), BARE_GROUP, "$", mkstream=True)
            if shared is None:
                online = make(
                    MessageType.STATUS_ONLINE, p.StatusOnline(replica="raw"), from_agent=name
                )
                await client.xadd(keys.out(name), {STREAM_FIELD: encode(online)})
        done = asyncio.Event()
        tasks = [asyncio.create_task(agent(client, name, done)) for name in agents]
        ready.set()
        await _until(stop)
        done.set()
        await asyncio.gather(*tasks)
        await client.aclose()

    _profiled(main, None)
    conn.send(received)
    conn.close()
