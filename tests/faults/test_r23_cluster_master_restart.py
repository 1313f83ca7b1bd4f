"""Row 23: a Redis Cluster master restarts mid-run (SHUTDOWN, then the same port and
nodes.conf; AOF on, so its data survives). It is the master of the `{p0}` slot: the leader
lease, the commands and the commit journal live there. Every run finishes, and every cue
is GO'd exactly once: no acknowledged work is lost and none is applied twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard.embedded_cluster import EmbeddedCluster
from protocols.keys import Keys, hub_group
from tests.e2e.procs import Procs, child_env, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import dead_letters, get_run, gos, messages, start, submit, sync_client
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENTS = ["fx-mr-a", "fx-mr-b", "fx-mr-c"]
RUNS = 8
CUES = ["A", "B", "C", "D"]
CUELIST = {
    "cuelist": "master-restart",
    "defaults": {"ack_timeout_s": 30, "standby_timeout_s": 30, "go_timeout_s": 30},
    "cues": [
        {
            "id": cue,
            "target_agents": AGENTS,
            "action": {"execute_ms": 300},
            **({"auto_follow": CUES[i + 1]} if i + 1 < len(CUES) else {}),
        }
        for i, cue in enumerate(CUES)
    ],
}
DONE = ("success", "partial", "failed", "cancelled")


@pytest.fixture(scope="module")
def durable_cluster() -> Iterator[EmbeddedCluster]:
    """A cluster of its own, with AOF on: a master it restarts keeps what it acknowledged."""
    with EmbeddedCluster(appendonly=True) as cluster:
        yield cluster


def test_a_master_restarts_mid_run_and_no_acknowledged_work_is_lost(
    durable_cluster: EmbeddedCluster, tmp_path: Path, figure: Figure
) -> None:
    env = child_env(durable_cluster, CALLBOARD_LEASE_MS="1500", CALLBOARD_MIN_IDLE_MS="1000")
    keys = Keys(env["CALLBOARD_PREFIX"])
    procs = Procs(env, tmp_path)
    r = sync_client(durable_cluster)
    try:
        url = procs.hub()
        for agent in AGENTS:
            procs.echo(agent)
        api = httpx.Client(base_url=url, timeout=10)
        wait_online(api, AGENTS)
        submit(api, CUELIST)
        run_ids = [start(api, "master-restart") for _ in range(RUNS)]
        eventually_sync(
            lambda: all(get_run(api, run_id).get("cues", {}).get("A", {}).get("state")
                        not in (None, "pending", "warning", "standby") for run_id in run_ids),
            30, interval_s=0.05, message="every run past its first GO",
        )  # fmt: skip
        node = durable_cluster.node_of(_port_of(r, keys.leader()))
        node.restart()  # SIGTERM: the AOF is flushed; same port, same nodes.conf
        durable_cluster.wait_ok(30)

        def finished() -> list[dict[str, object]] | None:
            runs = [get_run(api, run_id) for run_id in run_ids]
            return runs if all(run.get("status") in DONE for run in runs) else None

        runs = eventually_sync(finished, 60, interval_s=0.2, message="every run finished")
        traces = {
            str(run["run_id"]): _trace(r, keys, str(run["run_id"]))
            for run in runs
            if run["status"] != "success"
        }
        counted: Counter[tuple[str, str, int]] = Counter()
        for run_id in run_ids:
            counted.update({(run_id, *k): v for k, v in gos(r, keys, AGENTS, run_id).items()})
        api.close()
    finally:
        procs.stop()
        r.close()
    statuses = Counter(str(run["status"]) for run in runs)
    expected = {(run_id, agent, cue, 1) for run_id in run_ids for agent in AGENTS for cue in CUES}
    figure(
        row=23,
        fault=f"Redis Cluster: the {{p0}} master restarts (SHUTDOWN, AOF) with {RUNS} runs going",
        promise="every run finishes; every cue GO'd exactly once per target",
        measured=f"runs {dict(statuses)}; GOs per target {sorted(set(counted.values()))}; "
        f"{len(counted)}/{len(expected)} (run, target, cue) GO'd",
    )
    why = {  # what ended a run that did not succeed: each cue's state and error
        str(run["run_id"]): {c: (v.get("state"), v.get("error")) for c, v in run["cues"].items()}
        for run in runs
        if run["status"] != "success" and isinstance(run.get("cues"), dict)
    }
    # and for each, what each side wrote: the agents' replies, the hub's pending entries
    assert statuses == {"success": RUNS}, (statuses, why, traces)
    assert set(counted) == expected, sorted(expected - set(counted))[:5]
    assert set(counted.values()) == {1}, counted


def _port_of(r: object, key: str) -> int:
    """The port of the master that holds `key`."""
    node = r.get_node_from_key(key)  # type: ignore[attr-defined]
    return int(node.port)


def _trace(r: Any, keys: Keys, run_id: str) -> dict[str, object]:
    """For a run that failed: each agent's GOs and replies for it (type, cue, entry id),
    and the entries still pending in the hub's group on each out stream."""
    found: dict[str, object] = {}
    for agent in AGENTS:
        got = [
            (m["message_type"], m["cue_id"], i)
            for i, m in messages(r, keys.inbox(agent))
            if m.get("run_id") == run_id
        ]
        sent = [
            (m["message_type"], m["cue_id"], i)
            for i, m in messages(r, keys.out(agent))
            if m.get("run_id") == run_id
        ]
        pending = r.xpending_range(keys.out(agent), hub_group(0), "-", "+", 100)
        found[agent] = {"got": got, "sent": sent, "hub_pending": [
            (p["message_id"], p["consumer"], p["times_delivered"]) for p in pending
        ]}  # fmt: skip
    found["dead"] = [
        (letter.get("reason"), letter.get("entry_id"), letter.get("stream"))
        for letter in dead_letters(r, keys)
    ]
    return found
