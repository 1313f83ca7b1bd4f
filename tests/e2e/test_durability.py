"""Durability with real processes: a hub killed with -9 mid-run resumes it, and a second hub
takes over the engine when the leader goes; every target gets exactly one GO per attempt."""

from __future__ import annotations

import json
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer, free_port
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType
from tests.e2e.procs import Procs, child_env
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENTS = ["dur-a", "dur-b", "dur-c"]
CUELIST = {
    "cuelist": "durable",
    "defaults": {"ack_timeout_s": 10, "standby_timeout_s": 30, "go_timeout_s": 30},
    "cues": [
        {
            "id": "BARRIER",
            "target_agents": AGENTS,
            "action": {"prepare_ms": 1500, "execute_ms": 300},
            "auto_follow": "AFTER",
        },
        {"id": "AFTER", "target_agents": AGENTS[:1], "action": {"execute_ms": 50}},
    ],
}


@pytest.fixture
def cluster(redis_server: EmbeddedServer, tmp_path: Path) -> Iterator[tuple[Procs, Keys]]:
    env = child_env(redis_server, CALLBOARD_LEASE_MS="1500", CALLBOARD_MIN_IDLE_MS="1000")
    procs = Procs(env, tmp_path)
    try:
        for agent in AGENTS:
            procs.echo(agent)
        yield procs, Keys(env["CALLBOARD_PREFIX"])
    finally:
        procs.stop()


def _start(url: str) -> str:
    r = httpx.post(f"{url}/v1/cuelists", json=CUELIST, timeout=10)
    assert r.status_code == 201, r.text
    r = httpx.post(f"{url}/v1/runs", json={"cuelist": "durable"}, timeout=10)
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def _run(url: str, run_id: str) -> dict:  # type: ignore[type-arg]
    try:
        return httpx.get(f"{url}/v1/runs/{run_id}", timeout=2).json()  # type: ignore[no-any-return]
    except httpx.HTTPError:
        return {}


def _gos(server: EmbeddedServer, keys: Keys, run_id: str) -> Counter[tuple[str, str, int]]:
    """(agent, cue, attempt) -> how many coord.go messages reached that agent's inbox."""
    client = redis.Redis.from_url(server.url)
    seen: Counter[tuple[str, str, int]] = Counter()
    for agent in AGENTS:
        for _, fields in client.xrange(keys.inbox(agent)):
            msg = json.loads(fields[STREAM_FIELD.encode()])
            if msg["message_type"] == MessageType.COORD_GO.value and msg["run_id"] == run_id:
                seen[(agent, msg["cue_id"], msg["payload"]["attempt"])] += 1
    client.close()
    return seen


def _follower(procs: Procs) -> str:
    """A second hub: serving the API, waiting to lead."""
    port = free_port()
    procs.spawn(f"hub-{port}", [sys.executable, "-m", "hub.main", "--port", str(port)])
    url = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    eventually_sync(serving, 30, message="second hub serving")
    return url


def _wait_for_success(url: str, run_id: str) -> dict:  # type: ignore[type-arg]
    eventually_sync(
        lambda: _run(url, run_id).get("status") == "success", 60, message="run succeeded"
    )
    return _run(url, run_id)


def test_hub_killed_during_standby_resumes_with_one_go_per_attempt(
    cluster: tuple[Procs, Keys], redis_server: EmbeddedServer
) -> None:
    procs, keys = cluster
    url = procs.hub()
    run_id = _start(url)
    eventually_sync(
        lambda: _run(url, run_id).get("cues", {}).get("BARRIER", {}).get("state") == "standby",
        30, message="BARRIER in standby",
    )  # fmt: skip
    hub = procs.procs[-1]
    hub.send_signal(signal.SIGKILL)
    hub.wait(10)
    url = procs.hub()  # a fresh hub: waits out the dead one's lease, then resumes the run
    run = _wait_for_success(url, run_id)
    assert run["cues"]["BARRIER"]["attempt"] == 1
    gos = _gos(redis_server, keys, run_id)
    assert gos == Counter({**{(a, "BARRIER", 1): 1 for a in AGENTS}, ("dur-a", "AFTER", 1): 1})


def test_second_hub_takes_over_when_the_leader_dies(
    cluster: tuple[Procs, Keys], redis_server: EmbeddedServer
) -> None:
    procs, keys = cluster
    leader_url = procs.hub()
    leader = procs.procs[-1]
    follower_url = _follower(procs)
    health = httpx.get(f"{follower_url}/healthz", timeout=2).json()
    assert health["leader"] is False  # one leads, all serve the API
    run_id = _start(follower_url)  # commands reach the leader through Redis
    eventually_sync(
        lambda: _run(follower_url, run_id).get("cues", {}).get("BARRIER", {}).get("state")
        in ("standby", "go"),
        30, message="BARRIER called",
    )  # fmt: skip
    leader.send_signal(signal.SIGKILL)
    leader.wait(10)
    eventually_sync(
        lambda: httpx.get(f"{follower_url}/healthz", timeout=2).json().get("leader") is True,
        15, message="follower took over",
    )  # fmt: skip
    _wait_for_success(follower_url, run_id)
    gos = _gos(redis_server, keys, run_id)
    assert set(gos.values()) == {1}, gos
    del leader_url
