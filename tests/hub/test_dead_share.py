"""One sender's flood, however slow (within its budget of letters), holds at most its
share of the capped dead-letter stream: every other sender's letters stay."""

from __future__ import annotations

import pytest

from hub.dead import Bad, Budgets, DeadLetters, Shares
from hub.service import Hub
from protocols.keys import Keys
from protocols.transport import Delivery
from tests.helpers import eventually

pytestmark = pytest.mark.redis


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _drained(hub: Hub, stream: str) -> bool:
    groups = await hub.transport._client.xinfo_groups(stream)
    return any(g["name"] == b"hub" and g["lag"] == 0 and g["pending"] == 0 for g in groups)


async def _senders(hub: Hub) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, f in await hub.transport._client.xrange(hub.keys.dead):
        counts[f[b"sender"].decode()] = counts.get(f[b"sender"].decode(), 0) + 1
    return counts


async def test_a_slow_flood_does_not_push_another_senders_letters_out(hub: Hub, keys: Keys) -> None:
    r, dead = hub.transport._client, hub.router.dead
    hub.transport.deadletter_maxlen, dead.shares.share = 300, 30  # a tenth of the stream's cap
    clock = dead.budgets.clock = FakeClock()
    await r.xadd(keys.out("honest"), {"m": b"honest garbage: its letter is the evidence"})
    await eventually(lambda: _drained(hub, keys.out("honest")), 10)
    for start in range(0, 600, 100):  # twice the cap, within the budget (a faked clock)
        async with r.pipeline(transaction=False) as pipe:
            for i in range(start, start + 100):
                pipe.xadd(keys.out("evil"), {"m": b"not json %d" % i})
            await pipe.execute()
        await eventually(lambda: _drained(hub, keys.out("evil")), 10)
        clock.now += 100 / dead.budgets.per_s
    assert await _senders(hub) == {"honest": 1, "evil": 30}
    over = hub.metrics.dead_letters_over_share.labels("bad_message")._value.get()
    # each entry past the share counted; one read again (a step's write refused when the
    # lease was lost on a loaded machine) counts again: the stream above is the exact check
    assert over >= 600 - 30


async def test_a_sender_holds_one_share_whatever_the_partitions(hub: Hub, keys: Keys) -> None:
    """Each partition's router counted a sender's letters on its own, and the sender picks
    a bad entry's partition by the run id it writes: it held a share in each partition (all
    of the stream with ten). The hub's partitions share one count."""
    hub.transport.deadletter_maxlen = 30  # a share of 3
    shares = Shares(hub.transport)
    parts = [DeadLetters(hub.transport, keys, hub.metrics, Budgets(1000, 1000.0), shares)
             for _ in range(2)]  # fmt: skip
    out = keys.out("evil")
    for dead in parts:  # partition 0's router, partition 1's
        bad = [Bad(Delivery(out, f"1-{i}", b"x"), "bad_message", "x", "evil") for i in range(5)]
        await dead.write(bad)
    assert await _senders(hub) == {"evil": 3}
