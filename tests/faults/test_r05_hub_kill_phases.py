"""Row 5: kill -9 the hub in each phase of a 5-agent barrier cue (WARNING, STANDBY, GO,
completion) and start a fresh one: the run completes, every target got exactly one GO per
attempt, nothing lost. WARNING and completion are held open by freezing one agent."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from protocols.keys import Keys
from tests.e2e.procs import Procs, child_env, wait_online
from tests.faults.conftest import Figure, Server
from tests.faults.tools import get_run, gos, start, submit, sync_client
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENTS = [f"fx-bar-{i}" for i in range(5)]
CUELIST = {
    "cuelist": "barrier5",
    "defaults": {"ack_timeout_s": 30, "standby_timeout_s": 30, "go_timeout_s": 30},
    "cues": [
        {
            "id": "BARRIER",
            "target_agents": AGENTS,
            "action": {"prepare_ms": 2000, "execute_ms": 2000},
            "auto_follow": "AFTER",
        },
        {"id": "AFTER", "target_agents": AGENTS[:1], "action": {"execute_ms": 10}},
    ],
}


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest) -> Server:
    """The session's server, or the 3-master Redis Cluster (indirect param "cluster")."""
    name = "redis_cluster" if request.param == "cluster" else "redis_server"
    found: Server = request.getfixturevalue(name)
    return found


@pytest.fixture(scope="module")
def cluster(
    server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Procs, dict[str, subprocess.Popen[bytes]]]]:
    env = child_env(server, CALLBOARD_LEASE_MS="1500", CALLBOARD_MIN_IDLE_MS="1000")
    procs = Procs(env, tmp_path_factory.mktemp("r05"))
    try:
        agents = {agent: procs.echo(agent) for agent in AGENTS}
        yield procs, agents
    finally:
        procs.stop()


def _barrier(url: str, run_id: str) -> dict[str, Any]:
    with httpx.Client(base_url=url) as api:
        return get_run(api, run_id).get("cues", {}).get("BARRIER", {})  # type: ignore[no-any-return]


def _targets_in(cue: dict[str, Any], state: str) -> int:
    return sum(1 for s in cue.get("targets", {}).values() if s == state)


# For each phase: what to freeze first, and when the cue is "in" that phase.
PHASES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "warning": lambda c: c.get("state") == "warning" and _targets_in(c, "prepared") == 4,
    "standby": lambda c: c.get("state") == "standby",
    "go": lambda c: c.get("state") == "go" and _targets_in(c, "completed") == 0,
    "completion": lambda c: c.get("state") == "go" and _targets_in(c, "completed") == 4,
}


# Every phase on one server; on the Redis Cluster the phase with GOs in flight (where a
# step journaled but not yet applied matters), to keep the cluster rows short.
RUNS = [("single", phase) for phase in PHASES] + [("cluster", "go")]


@pytest.mark.parametrize(("server", "phase"), RUNS, indirect=["server"])
def test_hub_killed_in_each_phase_resumes_the_run(
    cluster: tuple[Procs, dict[str, subprocess.Popen[bytes]]],
    server: Server,
    figure: Figure,
    phase: str,
) -> None:
    procs, agents = cluster
    url = procs.hub()
    hub = procs.procs[-1]
    api = httpx.Client(base_url=url, timeout=10)
    wait_online(api, AGENTS)
    submit(api, CUELIST)
    frozen = agents[AGENTS[-1]]
    if phase == "warning":
        frozen.send_signal(signal.SIGSTOP)  # its ack.warning waits: WARNING stays open
    run_id = start(api, "barrier5")
    if phase == "completion":
        eventually_sync(lambda: _barrier(url, run_id).get("state") == "go", 20, message="GO")
        frozen.send_signal(signal.SIGSTOP)  # its completion waits: 4 of 5 done
    try:
        eventually_sync(
            lambda: PHASES[phase](_barrier(url, run_id)), 20, interval_s=0.02,
            message=f"BARRIER in {phase}",
        )  # fmt: skip
        hub.send_signal(signal.SIGKILL)
        hub.wait(10)
    finally:
        frozen.send_signal(signal.SIGCONT)
    api.close()
    restarted = time.monotonic()
    url = procs.hub()
    api = httpx.Client(base_url=url, timeout=10)
    try:
        _check(procs, server, api, run_id, restarted, figure, phase)
    finally:
        api.close()
        procs.procs[-1].terminate()  # the next phase starts its own hub
        procs.procs[-1].wait(15)


def _check(
    procs: Procs,
    server: Server,
    api: httpx.Client,
    run_id: str,
    restarted: float,
    figure: Figure,
    phase: str,
) -> None:
    keys = Keys(procs.env["CALLBOARD_PREFIX"])
    run = eventually_sync(
        lambda: (run := get_run(api, run_id)).get("status") in ("success", "partial", "failed")
        and run,
        60, interval_s=0.05, message="run finished after the restart",
    )  # fmt: skip
    took_s = time.monotonic() - restarted
    client = sync_client(server)
    counted = gos(client, keys, AGENTS, run_id)
    client.close()
    expected = Counter({**{(a, "BARRIER", 1): 1 for a in AGENTS}, (AGENTS[0], "AFTER", 1): 1})
    per_target = sorted(set(counted.values()))
    figure(
        row=5,
        phase=phase,
        fault=f"kill -9 the hub during {phase} of a 5-agent barrier",
        promise="run completes; exactly one GO per target per attempt",
        measured=f"run {run['status']} {took_s:.1f} s after the new hub started; "
        f"BARRIER attempt {run['cues']['BARRIER']['attempt']}; GOs per target {per_target}",
    )
    assert run["status"] == "success", run
    assert run["cues"]["BARRIER"]["attempt"] == 1
    assert counted == expected, counted
