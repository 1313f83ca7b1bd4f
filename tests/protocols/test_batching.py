"""The replica's write coalescer: order kept, concurrent writes batched, failures shared."""

from __future__ import annotations

import asyncio
import logging

import pytest

from protocols.batching import Coalescer


class Sink:
    """A flush that records each batch; `fail` makes the next batch raise."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.fail: Exception | None = None
        self.gate = asyncio.Event()
        self.gate.set()
        self.flushing = asyncio.Event()

    async def flush(self, items: list[int]) -> list[int]:
        self.flushing.set()
        await self.gate.wait()
        self.batches.append(items)
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        return [i * 10 for i in items]


async def test_a_lone_call_is_written_alone_with_its_result() -> None:
    sink = Sink()
    assert await Coalescer(sink.flush, "t")(7) == 70
    assert sink.batches == [[7]]


async def test_calls_made_together_share_one_batch_in_call_order() -> None:
    sink = Sink()
    out = Coalescer(sink.flush, "t")
    assert await asyncio.gather(*(out(i) for i in range(5))) == [0, 10, 20, 30, 40]
    assert sink.batches == [[0, 1, 2, 3, 4]]


async def test_calls_made_while_a_batch_is_in_flight_go_in_the_next() -> None:
    """...and are not lent out meanwhile (`take`): one batch is written at a time."""
    sink = Sink()
    sink.gate.clear()
    out = Coalescer(sink.flush, "t")
    first = out.submit(1)
    await sink.flushing.wait()  # [1] is in flight, held at the gate
    later = [out.submit(i) for i in (2, 3)]
    assert out.take() is None
    sink.gate.set()
    assert await asyncio.gather(first, *later) == [10, 20, 30]
    assert out.take() is None  # nothing queued
    assert sink.batches == [[1], [2, 3]]


async def test_a_batch_is_capped_and_the_rest_follows() -> None:
    sink = Sink()
    out = Coalescer(sink.flush, "t", most=3)
    await asyncio.gather(*(out(i) for i in range(7)))
    assert sink.batches == [[0, 1, 2], [3, 4, 5], [6]]


async def test_a_failed_batch_fails_each_of_its_calls_and_the_next_is_tried_afresh() -> None:
    sink = Sink()
    sink.fail = ConnectionError("redis gone")
    out = Coalescer(sink.flush, "t")
    results = await asyncio.gather(out(1), out(2), return_exceptions=True)
    assert [type(r) for r in results] == [ConnectionError, ConnectionError]
    assert await out(3) == 30
    assert sink.batches == [[1, 2], [3]]


async def test_post_does_not_wait_and_logs_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink()
    sink.fail = ConnectionError("redis gone")
    out = Coalescer(sink.flush, "out")
    with caplog.at_level(logging.WARNING, logger="callboard.batching"):
        out.post(1)
        await out.idle()
    assert sink.batches == [[1]]
    assert "out write failed: redis gone" in caplog.text


def test_a_coalescer_outlives_the_event_loop_it_was_first_used_in() -> None:
    """A store made once and used from one asyncio.run after another (a CLI, tests)."""
    flushed: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        flushed.append(items)
        return [i * 2 for i in items]

    coalescer: Coalescer[int, int] = Coalescer(flush, "loops")

    async def once(n: int) -> list[int]:
        return list(await asyncio.gather(*(coalescer(i) for i in range(n))))

    assert asyncio.run(once(3)) == [0, 2, 4]
    assert asyncio.run(once(2)) == [0, 2]
    assert flushed == [[0, 1, 2], [0, 1]]


async def _turns(n: int = 20) -> None:
    """Let every task that is ready run, `n` times over (for what must not happen)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_batch_taken_is_written_by_its_taker_and_the_next_waits_for_it() -> None:
    """`take` lends the queued items to a caller with a round trip of its own (a replica's
    next read); nothing else is flushed until it settles them, so writes stay in order."""
    sink = Sink()
    out = Coalescer(sink.flush, "t")
    lent = [out.submit(i) for i in (1, 2)]
    assert out.take() == [1, 2]
    assert out.take() is None  # lent already: one batch at a time
    later = out.submit(3)
    await _turns()
    assert sink.batches == []  # [3] waits for the lent batch
    out.settle([10, 20])
    assert await asyncio.gather(*lent, later) == [10, 20, 30]
    assert sink.batches == [[3]]


async def test_a_lent_batch_that_failed_fails_its_calls_only() -> None:
    sink = Sink()
    out = Coalescer(sink.flush, "t")
    lent = out.submit(1)
    assert out.take() == [1]
    later = out.submit(2)
    out.settle(ConnectionError("lost with the read"))
    with pytest.raises(ConnectionError, match="lost with the read"):
        await lent
    assert await later == 20
    assert sink.batches == [[2]]


async def test_a_lent_batch_not_written_goes_first_in_the_next() -> None:
    """Refused whole (Redis out of memory: nothing applied), a lent batch is given back:
    the coalescer writes it itself, before what was queued after it."""
    sink = Sink()
    out = Coalescer(sink.flush, "t")
    lent = [out.submit(i) for i in (1, 2)]
    assert out.take() == [1, 2]
    later = out.submit(3)
    out.settle(MemoryError("refused"), again=True)
    assert await asyncio.gather(*lent, later) == [10, 20, 30]
    assert sink.batches == [[1, 2, 3]]


async def test_idle_waits_for_a_lent_batch() -> None:
    sink = Sink()
    out = Coalescer(sink.flush, "t")
    lent = out.submit(1)
    assert out.take() == [1]
    waiting = asyncio.create_task(out.idle())
    await _turns()
    assert not waiting.done()
    out.settle([10])
    await asyncio.wait_for(waiting, 5)
    assert await lent == 10
