"""A state write whose reply never comes (a frozen node, a half-dead link) ends within its
deadline, its outcome unknown, instead of holding the engine while the lease renews."""

from __future__ import annotations

import asyncio
import time

import pytest

from callboard.embedded import EmbeddedServer
from hub.engine.core import Engine
from hub.engine.outbox import Outbox
from hub.store import ops
from hub.store.lease import LeaseStore
from hub.store.state import StateStore
from protocols.errors import Unreachable
from protocols.keys import Keys
from protocols.transport import Storage
from tests.lossy_proxy import lossy_clients

pytestmark = pytest.mark.redis


async def test_a_commit_whose_reply_never_comes_ends_at_its_deadline(
    redis_server: EmbeddedServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with lossy_clients(redis_server.port, keys.prefix) as (proxy, client, _):
        db = Storage(client)
        store, lease = StateStore(db, keys), LeaseStore(db, keys)
        assert await lease.acquire("hub-a:1", 30_000)
        monkeypatch.setattr(ops, "COMMIT_DEADLINE_S", 1.0)
        out = Outbox()
        out.raw.append(["SET", f"{keys.prefix}probe", "1"])
        proxy.arm(b"EVALSHA", "swallow")  # the commit's script runs; its reply is lost
        started = time.monotonic()
        with pytest.raises(Unreachable, match="no answer within 1s"):
            await asyncio.wait_for(store.commit(out, Engine(keys), "hub-a:1"), 15)
        assert time.monotonic() - started < 10
        assert proxy.fired == ["swallow"]
        assert await lease.renew("hub-a:1", 30_000)  # the lease alone would have held on
