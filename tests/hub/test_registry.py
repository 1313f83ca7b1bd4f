"""The registry stays bounded whatever replica names an agent's messages make up."""

from __future__ import annotations

from typing import Any

from hub.registry import NAME_CHARS, REPLICAS_MAX, Registry
from protocols import payloads as p
from protocols.codec import make
from protocols.keys import Keys
from protocols.messages import MessageType as T


def test_replicas_per_agent_are_bounded_and_live_ones_are_kept() -> None:
    registry = Registry(transport=Any, store=Any, keys=Keys())  # type: ignore[arg-type]
    online = p.StatusOnline(replica="real-1", kind="echo")
    registry.apply(make(T.STATUS_ONLINE, online, from_agent="a"))
    for i in range(2_000):
        name = f"ghost-{i}" + "x" * (200 if i % 2 else 0)
        offline = make(T.STATUS_OFFLINE, p.StatusOffline(replica=name), from_agent="a")
        registry.apply(offline)
    replicas = registry.agents["a"].replicas
    assert len(replicas) == REPLICAS_MAX
    assert "real-1" in replicas and replicas["real-1"].online  # an online one is not evicted
    assert max(len(name) for name in replicas) == NAME_CHARS
