"""The event fanout's count of open streams stays true when Redis fails as one opens."""

from __future__ import annotations

import pytest

from callboard.embedded import EmbeddedServer
from hub.fanout import EventFanout
from protocols.errors import Unreachable
from protocols.keys import Keys

pytestmark = pytest.mark.redis


async def test_a_follower_whose_first_read_fails_holds_no_stream(
    redis_server: EmbeddedServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    fanout = EventFanout(redis_server.url, keys, max_streams=1, per_client=1)

    async def gone(run_id: str) -> str:
        raise Unreachable("Redis went away")

    with monkeypatch.context() as patched:  # the read of the run's newest event fails
        patched.setattr(fanout.store, "events_position", gone)
        with pytest.raises(Unreachable):
            async with fanout.follow("r1", "client"):
                pass
    assert fanout.open_streams == 0
    try:
        async with fanout.follow("r1", "client"):  # the one stream allowed is still free
            assert fanout.open_streams == 1
    finally:
        await fanout.close()
    assert fanout.open_streams == 0
