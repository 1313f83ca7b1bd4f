"""The cluster the suite starts itself: three masters joined into one cluster, also with the
bundled Valkey binary and no cli at hand (slots assigned and nodes met by hand)."""

from __future__ import annotations

import pytest
import redis

from callboard import embedded_cluster
from callboard.embedded import bundled_binary
from callboard.embedded_cluster import EmbeddedCluster
from protocols.keys import key_slot

pytestmark = pytest.mark.redis


def test_the_bundled_binary_joins_a_cluster_without_a_cli(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedded_cluster, "cli_binary", lambda server: None)
    with EmbeddedCluster(binary=bundled_binary()) as cluster:
        assert cluster.state_ok()
        assert cluster.url.startswith("redis+cluster://127.0.0.1:")
        client = redis.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
        try:
            keys = [f"k{i}" for i in range(30)]
            assert len({key_slot(k) for k in keys}) > 20
            for key in keys:
                client.set(key, key)
            assert [client.get(k) for k in keys] == [k.encode() for k in keys]
            assert len(client.get_primaries()) == 3
        finally:
            client.close()
