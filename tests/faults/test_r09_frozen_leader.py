"""Row 9: two hubs; the leader is frozen (SIGSTOP) for 4x its lease, then resumed. The other
hub leads within one lease period after the frozen one's lease expired; the stale leader's
state writes are refused (fencing) and it follows again; no cue is GO'd twice."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer, free_port
from hub.store.commit import _COMMIT
from hub.store.journal import JOURNAL_LUA
from hub.store.ops import flat
from protocols.keys import Keys
from tests.e2e.procs import Procs, wait_done, wait_online
from tests.faults.conftest import ON_BOTH, Figure, Server
from tests.faults.tools import get_run, gos, start, submit, sync_client
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

LEASE_MS = 1500
FREEZE_S = 20.0  # the figure: the stale leader sleeps through many leases
AGENTS = ["fx-lead-a", "fx-lead-b"]
CUELIST = {
    "cuelist": "frozen-leader",
    "defaults": {"ack_timeout_s": 30, "standby_timeout_s": 30, "go_timeout_s": 30},
    "cues": [
        {"id": "A", "target_agents": AGENTS, "action": {"execute_ms": 1500}, "auto_follow": "B"},
        {"id": "B", "target_agents": AGENTS, "action": {"execute_ms": 1500}, "auto_follow": "C"},
        {"id": "C", "target_agents": AGENTS, "action": {"execute_ms": 100}},
    ],
}


def _leads(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=0.5).json().get("leader") is True
    except httpx.HTTPError:
        return False


@ON_BOTH
def test_frozen_leader_is_replaced_and_fenced(procs: Procs, server: Server, figure: Figure) -> None:
    keys = Keys(procs.env["CALLBOARD_PREFIX"])
    r = sync_client(server)
    # on the cluster, frozen for 4 leases (the 20 s of the single-server row add nothing
    # the journaled commit's fences would see differently)
    freeze_s = FREEZE_S if isinstance(server, EmbeddedServer) else 4 * LEASE_MS / 1000
    leader_url = procs.hub()
    leader = procs.procs[-1]
    port = free_port()
    procs.spawn(f"hub-{port}", [sys.executable, "-m", "hub.main", "--port", str(port)])
    follower_url = f"http://127.0.0.1:{port}"
    eventually_sync(lambda: _up(follower_url), 30, message="second hub serving")
    for agent in AGENTS:
        procs.echo(agent)
    api = httpx.Client(base_url=follower_url, timeout=10)
    try:
        wait_online(api, AGENTS)
        submit(api, CUELIST)
        run_id = start(api, "frozen-leader")
        eventually_sync(
            lambda: get_run(api, run_id).get("cues", {}).get("A", {}).get("state") == "go",
            20, message="A running",
        )  # fmt: skip
        stale_value = r.get(keys.leader()).decode()
        leader.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        try:
            lease_left_s = max(r.pttl(keys.leader()), 0) / 1000
            eventually_sync(lambda: _leads(follower_url), 10, interval_s=0.02, message="takeover")
            took_over_s = time.monotonic() - frozen_at
            new_value = r.get(keys.leader()).decode()
            # freeze on past the takeover, 20 s in all, before the stale one wakes
            eventually_sync(
                lambda: time.monotonic() - frozen_at >= freeze_s, freeze_s + 1, interval_s=0.05
            )
        finally:
            leader.send_signal(signal.SIGCONT)
        # The stale leader's fencing token no longer opens the commit: the write is refused.
        probe = f"{keys.prefix}fx:stale-probe"
        fenced = [keys.leader(), keys.commit("stale-probe-commit")]  # as FencedCommit sends it
        # on a cluster one script takes one slot's keys: the probe's SET only on one server
        one_server = isinstance(server, EmbeddedServer)
        words = flat([["SET", probe, "stale"]], fenced) if one_server else []
        with pytest.raises(redis.ResponseError, match="STALE"):
            r.eval(_COMMIT, len(fenced), *fenced, stale_value, 30_000, *words)
        assert not r.exists(probe)
        if not isinstance(server, EmbeddedServer):  # the cluster's commit: its journal script
            journaled = [keys.leader(), keys.commit("stale-probe"), keys.journal()]
            with pytest.raises(redis.ResponseError, match="STALE"):
                r.eval(JOURNAL_LUA, 3, *journaled, stale_value, 30_000, "stale-probe", b"")
            assert not r.exists(keys.commit("stale-probe"))
        run = wait_done(api, run_id, timeout_s=60)
        log_name = f"hub-{leader_url.rsplit(':', 1)[1]}"
        eventually_sync(
            lambda: "following again" in procs.log(log_name)
            or "lost the leader lease" in procs.log(log_name),
            10, message="the stale leader noticed",
        )  # fmt: skip
        stale_log = procs.log(log_name)
        refused = stale_log.count("state write refused") + stale_log.count("not the leader")
        counted = gos(r, keys, AGENTS, run_id)
        go_events = Counter(
            (e["cue"], e["attempt"]) for e in _events(r, keys, run_id) if e["type"] == "go"
        )
    finally:
        api.close()
        r.close()
    stale_token, new_token = int(stale_value.rsplit(":", 1)[1]), int(new_value.rsplit(":", 1)[1])
    after_expiry_s = took_over_s - lease_left_s
    figure(
        row=9,
        fault=f"two hubs; SIGSTOP the leader for {freeze_s:g} s (lease {LEASE_MS} ms), SIGCONT",
        promise="new leader within one lease period of the old lease's expiry; stale "
        "leader's writes refused; no cue GO'd twice",
        measured=f"takeover {took_over_s:.2f} s after the freeze ({after_expiry_s:.2f} s after "
        f"the lease expired); fence {stale_token} -> {new_token}; stale commit refused "
        f"(STALE); stale hub refused {refused} write(s) itself and followed again; GOs per "
        f"target per attempt {sorted(set(counted.values()))}; run {run['status']}",
    )
    assert after_expiry_s <= LEASE_MS / 1000
    assert new_token > stale_token and new_value.split(":")[0] != stale_value.split(":")[0]
    assert run["status"] == "success"
    assert set(counted.values()) == {1} and len(counted) == 3 * len(AGENTS), counted
    assert set(go_events.values()) == {1}, go_events
    assert leader.poll() is None, "the stale leader resumed as a follower, it did not crash"


def _up(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=0.5)
    except httpx.HTTPError:
        return False
    return True


def _events(r: redis.Redis, keys: Keys, run_id: str) -> list[dict[str, object]]:
    return [json.loads(f[b"e"]) for _, f in r.xrange(keys.run_events(run_id))]
