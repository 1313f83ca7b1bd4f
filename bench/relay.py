"""The "bare relay" baseline: the least a router over Redis Streams can do per message.

A producer process XADDs N messages to stream A; a relay loop reads A in a consumer group
and copies each entry to stream B (XADD) and XACKs it; a consumer process reads B. The
figure is end-to-end messages per second, from the producer's first XADD to the
consumer's Nth read, in two modes:

  batched    COUNT 100 reads, pipelined writes (one round trip per batch of 100)
  unbatched  COUNT 1: one message per round trip at every step

bench/routing.py imports `relay_loop` and `run_pipeline` to run the hub's router through
the same producer and consumer, against the same server, in the same run.

    python bench/relay.py [-n 50000] [--mode batched|unbatched|both] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from callboard.embedded import EmbeddedServer
from protocols import payloads as p
from protocols.codec import encode, make
from protocols.messages import MessageType
from protocols.transport import Redis, connect

RELAY_GROUP = "relay"
BATCH = 100
BLOCK_MS = 100

Relay = Callable[[str, str, str, int, int], Awaitable[int]]  # (url, source, sink, total, count)


def sample_message() -> bytes:
    """A realistic encoded envelope (~300 bytes), the same for every message."""
    go = make(
        MessageType.COORD_GO,
        p.CoordGo(cue_id="CUE-100", target_agents=["specialist-build"], action={"argv": ["make"]}),
        run_id="run-0001",
        cue_id="CUE-100",
        target_agents=("specialist-build",),
    )
    return encode(go)


async def relay_loop(
    client: Redis,
    source: str,
    sink: str,
    *,
    total: int,
    count: int = BATCH,
    group: str = RELAY_GROUP,
    consumer: str = "relay-1",
) -> int:
    """Copy `total` entries from `source` to `sink` (XREADGROUP, XADD, XACK); returns the count.

    Two round trips per read: the read, then the XADDs and the XACK pipelined. With
    count == 1 that is per message (the unbatched baseline).
    """
    moved = 0
    while moved < total:
        reply: Any = await client.xreadgroup(group, consumer, {source: ">"}, count, BLOCK_MS)
        if not reply:
            continue
        entries = reply[0][1]
        async with client.pipeline(transaction=False) as pipe:
            for _, fields in entries:
                pipe.xadd(sink, fields)
            pipe.xack(source, group, *[entry_id for entry_id, _ in entries])
            await pipe.execute()
        moved += len(entries)
    return moved


async def bare_relay(url: str, source: str, sink: str, total: int, count: int) -> int:
    """`relay_loop` on its own connection: the baseline `run_pipeline` runs by default."""
    client = connect(url)
    try:
        return await relay_loop(client, source, sink, total=total, count=count)
    finally:
        await client.aclose()


# -- the two ends, each in its own process -------------------------------------------------


def _produce(url: str, stream: str, total: int, batch: int, go: Any, started: Any) -> None:
    async def main() -> None:
        client = connect(url)
        data = sample_message()
        go.wait()
        started.value = time.monotonic()
        sent = 0
        while sent < total:
            n = min(batch, total - sent)
            if n == 1:
                await client.xadd(stream, {"m": data})
            else:
                async with client.pipeline(transaction=False) as pipe:
                    for _ in range(n):
                        pipe.xadd(stream, {"m": data})
                    await pipe.execute()
            sent += n
        await client.aclose()

    asyncio.run(main())


def _consume(url: str, stream: str, total: int, batch: int, ready: Any, finished: Any) -> None:
    async def main() -> None:
        client = connect(url)
        await client.ping()
        ready.set()
        last, seen = "0-0", 0
        while seen < total:
            reply: Any = await client.xread({stream: last}, count=batch, block=BLOCK_MS)
            if reply:
                entries = reply[0][1]
                seen += len(entries)
                last = entries[-1][0]
        finished.value = time.monotonic()
        await client.aclose()

    asyncio.run(main())


@dataclass
class Result:
    mode: str
    messages: int
    seconds: float
    msgs_per_s: float


async def run_pipeline(url: str, total: int, *, batched: bool, relay: Relay = bare_relay) -> Result:
    """Producer → `relay` (in this process) → consumer, on fresh keys; end-to-end rate."""
    tag = uuid.uuid4().hex[:8]
    source, sink = f"bench:{tag}:a", f"bench:{tag}:b"
    batch = BATCH if batched else 1
    setup = connect(url)
    await setup.xgroup_create(source, RELAY_GROUP, "0", mkstream=True)

    ctx = mp.get_context("spawn")
    go, ready = ctx.Event(), ctx.Event()
    started, finished = ctx.Value("d", 0.0), ctx.Value("d", 0.0)
    consumer = ctx.Process(target=_consume, args=(url, sink, total, batch, ready, finished))
    producer = ctx.Process(target=_produce, args=(url, source, total, batch, go, started))
    consumer.start()
    producer.start()
    await asyncio.to_thread(ready.wait, 30)
    relaying = asyncio.ensure_future(relay(url, source, sink, total, batch))
    go.set()
    moved = await relaying
    await asyncio.to_thread(consumer.join, 120)
    await asyncio.to_thread(producer.join, 120)
    await setup.delete(source, sink)
    await setup.aclose()
    if moved != total or consumer.exitcode != 0 or producer.exitcode != 0:
        raise RuntimeError(f"relay moved {moved}/{total}; exit codes {consumer.exitcode}")
    seconds = finished.value - started.value
    return Result("batched" if batched else "unbatched", total, seconds, total / seconds)


async def main(total: int, modes: list[str]) -> list[Result]:
    with EmbeddedServer() as server:
        return [await run_pipeline(server.url, total, batched=m == "batched") for m in modes]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--messages", type=int, default=50_000)
    parser.add_argument("--mode", choices=["batched", "unbatched", "both"], default="both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    modes = ["batched", "unbatched"] if args.mode == "both" else [args.mode]
    results = asyncio.run(main(args.messages, modes))
    if args.json:
        print(json.dumps([asdict(r) for r in results]))
    else:
        for r in results:
            rate = f"{r.msgs_per_s:9,.0f} msgs/s"
            print(f"bare relay {r.mode:<9} {r.messages} msgs in {r.seconds:6.2f} s: {rate}")
