"""Which client the transport makes: a RedisCluster when the URL says cluster, or the
setting CALLBOARD_REDIS_CLUSTER=1 does (it writes the URL so); a Redis otherwise."""

from __future__ import annotations

import pytest

from protocols.settings import Settings
from protocols.transport import Storage, connect
from protocols.transport._client import is_cluster, wants_cluster


def test_the_url_says_cluster() -> None:
    assert wants_cluster("redis+cluster://10.0.0.5:7000/0")
    assert wants_cluster("rediss+cluster://10.0.0.5:7000")
    assert not wants_cluster("redis://10.0.0.5:7000/0")
    assert is_cluster(connect("redis+cluster://127.0.0.1:1/0"))  # lazy: nothing dialled
    assert not is_cluster(connect("redis://127.0.0.1:1/0"))
    assert Storage(connect("redis+cluster://127.0.0.1:1/0")).is_cluster


def test_the_setting_writes_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://10.0.0.5:7000/0")
    assert Settings().redis_url == "redis://10.0.0.5:7000/0"
    monkeypatch.setenv("CALLBOARD_REDIS_CLUSTER", "1")
    assert Settings().redis_url == "redis+cluster://10.0.0.5:7000/0"
    monkeypatch.setenv("REDIS_URL", "rediss://10.0.0.5:7000/0")
    assert Settings().redis_url == "rediss+cluster://10.0.0.5:7000/0"
    monkeypatch.setenv("REDIS_URL", "redis+cluster://10.0.0.5:7000/0")
    assert Settings().redis_url == "redis+cluster://10.0.0.5:7000/0"
