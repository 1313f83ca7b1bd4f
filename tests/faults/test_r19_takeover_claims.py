"""Row 19: the leading hub is frozen (SIGSTOP) while a cue runs, and the completions its
agents send meanwhile are read by the frozen hub's consumer (held, never acknowledged: what
it would have read just before freezing). The other hub takes over and claims them at once:
the cue completes within one lease of the takeover, not after the idle limit (set to 30 s
here, the default)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer, free_port
from protocols.keys import HUB_GROUP, Keys
from tests.e2e.procs import Procs, child_env, wait_done, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import get_run, start, submit
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

LEASE_MS = 3000
MIN_IDLE_MS = 30_000
AGENTS = ["fx-claim-a", "fx-claim-b"]
CUELIST = {
    "cuelist": "held-entries",
    "cues": [
        {"id": "A", "target_agents": AGENTS, "action": {"execute_ms": 300}, "auto_follow": "B"},
        {"id": "B", "target_agents": AGENTS, "action": {"execute_ms": 50}},
    ],
}


def _health(url: str) -> dict[str, object]:
    try:
        return httpx.get(f"{url}/healthz", timeout=0.5).json()  # type: ignore[no-any-return]
    except httpx.HTTPError:
        return {}


def test_a_new_leader_claims_what_the_frozen_one_held(
    redis_server: EmbeddedServer, tmp_path: Path, figure: Figure
) -> None:
    env = child_env(
        redis_server, CALLBOARD_LEASE_MS=str(LEASE_MS), CALLBOARD_MIN_IDLE_MS=str(MIN_IDLE_MS)
    )
    keys = Keys(env["CALLBOARD_PREFIX"])
    procs = Procs(env, tmp_path)
    r = redis.Redis.from_url(redis_server.url)
    try:
        leader_url = procs.hub()
        leader = procs.procs[-1]
        old_id = str(_health(leader_url)["hub_id"])
        port = free_port()
        procs.spawn(f"hub-{port}", [sys.executable, "-m", "hub.main", "--port", str(port)])
        url = f"http://127.0.0.1:{port}"
        eventually_sync(lambda: bool(_health(url)), 30, message="second hub serving")
        for agent in AGENTS:
            procs.echo(agent)
        api = httpx.Client(base_url=url, timeout=10)
        wait_online(api, AGENTS)
        submit(api, CUELIST)
        run_id = start(api, "held-entries")
        eventually_sync(
            lambda: get_run(api, run_id).get("cues", {}).get("A", {}).get("state") == "go",
            20, interval_s=0.02, message="A running",
        )  # fmt: skip
        leader.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            held = 0
            for agent in AGENTS:  # the agents' completions, read by the frozen hub
                stream = keys.out(agent)
                eventually_sync(
                    lambda s=stream: r.xlen(s) and any(
                        b"status.completed" in f[b"m"] for _, f in r.xrange(s, count=1000)
                    ),
                    10, interval_s=0.02, message="completion sent",
                )  # fmt: skip
                reply = r.xreadgroup(HUB_GROUP, old_id, {stream: ">"}, count=1000)
                held += sum(len(rows) for _, rows in reply)
            eventually_sync(
                lambda: _health(url).get("leader") is True, 15, interval_s=0.02,
                message="takeover",
            )  # fmt: skip
            took_over = time.monotonic()
            takeover_s = took_over - frozen
            eventually_sync(
                lambda: get_run(api, run_id).get("cues", {}).get("A", {}).get("state")
                == "completed",
                MIN_IDLE_MS / 1000, interval_s=0.02, message="A completed",
            )  # fmt: skip
            waited_s = time.monotonic() - took_over
        finally:
            leader.send_signal(signal.SIGCONT)
        run = wait_done(api, run_id, timeout_s=30)
        api.close()
    finally:
        procs.stop()
        r.close()
    figure(
        row=19,
        fault=f"leader SIGSTOPped during a cue; {held} entries of its agents held by its "
        f"consumer; the other hub takes over (lease {LEASE_MS} ms, idle limit "
        f"{MIN_IDLE_MS} ms)",
        promise="no cue waits more than one lease for an entry the old leader held",
        measured=f"takeover {takeover_s:.2f} s after the freeze; the cue completed "
        f"{waited_s:.2f} s after the takeover (its held entries claimed as the term "
        f"began); run {run['status']}",
    )
    assert held >= len(AGENTS)
    assert waited_s <= LEASE_MS / 1000
    assert run["status"] == "success"
