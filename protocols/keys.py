"""The stream key layout of SPEC §3 under a configurable prefix, and the agent id rule."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_PREFIX = "cb:"
HUB_GROUP = "hub"  # the consumer group every hub process reads `out` streams in
STREAM_FIELD = "m"  # the one stream field that holds an encoded envelope

# Agent and replica ids: no `*`, `:`, `{`, `?` or spaces, so ACL key patterns are exact.
AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
_AGENT_ID = re.compile(AGENT_ID_PATTERN)


def is_agent_id(name: str) -> bool:
    return bool(_AGENT_ID.match(name))


@dataclass(frozen=True, slots=True)
class Keys:
    """Every stream key callboard uses, built from one prefix."""

    prefix: str = DEFAULT_PREFIX

    def out(self, agent: str) -> str:
        """Written only by `agent`; the key authenticates the sender."""
        return f"{self.prefix}out:{agent}"

    def inbox(self, agent: str) -> str:
        """Written by the hub, read by the agent's replicas in group `agent`."""
        return f"{self.prefix}in:{agent}"

    def done(self, agent: str, token: str) -> str:
        """A done-marker of `agent` for non-idempotent work: `{prefix}done:{agent}:{token}`."""
        return f"{self.prefix}done:{agent}:{token}"

    @property
    def broadcast(self) -> str:
        return f"{self.prefix}broadcast"

    @property
    def dead(self) -> str:
        return f"{self.prefix}dead"

    @property
    def audit(self) -> str:
        return f"{self.prefix}audit"

    @property
    def out_pattern(self) -> str:
        """SCAN MATCH pattern for every agent's out stream."""
        return f"{self.prefix}out:*"

    def agent_of_out(self, key: str) -> str | None:
        """The agent an `out` stream belongs to, or None when `key` is not one."""
        head = f"{self.prefix}out:"
        if not key.startswith(head):
            return None
        agent = key[len(head) :]
        return agent if is_agent_id(agent) else None

    def state(self, *parts: str) -> str:
        """A hub state key (runs, leases, registry...): `{prefix}{part}:{part}...`."""
        return self.prefix + ":".join(parts)
