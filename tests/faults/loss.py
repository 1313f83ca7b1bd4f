"""The loss rows' workload (rows 15-17): a hub and echo agents on a server of the row's
own, runs of sequential cues started before a fault, and what was lost when it ended: runs
that never finish, and completions Redis acknowledged that no run recorded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from protocols.messages import MessageType
from tests.e2e.procs import Procs, child_env, wait_online
from tests.faults.tools import get_run, messages, of_type, start, submit
from tests.helpers import eventually_sync

AGENTS = ["fx-loss-a", "fx-loss-b"]
CUES = 4
CUELIST = {
    "cuelist": "no-loss",
    "defaults": {"ack_timeout_s": 60, "standby_timeout_s": 60, "go_timeout_s": 60},
    "cues": [
        {"id": f"C{i}", "target_agents": AGENTS, "action": {"execute_ms": 150},
         "auto_follow": f"C{i + 1}" if i < CUES - 1 else None}
        for i in range(CUES)
    ],
}  # fmt: skip
FINAL = ("success", "partial", "failed", "cancelled")


@dataclass
class Workload:
    procs: Procs
    api: httpx.Client
    url: str
    keys: Keys
    server: EmbeddedServer
    run_ids: list[str] = field(default_factory=list)

    def start(self, n: int) -> None:
        self.run_ids += [start(self.api, "no-loss") for _ in range(n)]

    def running(self) -> bool:
        """Some run has a cue past its first (the fault lands mid-run)."""
        cue = [get_run(self.api, r).get("cues", {}).get("C1", {}) for r in self.run_ids]
        return any(c.get("state") not in (None, "pending") for c in cue)

    def wait_finished(self, timeout_s: float) -> dict[str, str]:
        """Each run's final status; a run not finished by the deadline is "unfinished"."""
        deadline = time.monotonic() + timeout_s
        status: dict[str, str] = {}
        while time.monotonic() < deadline and len(status) < len(self.run_ids):
            for run_id in self.run_ids:
                if run_id not in status and get_run(self.api, run_id).get("status") in FINAL:
                    status[run_id] = get_run(self.api, run_id)["status"]
            time.sleep(0.1)  # pacing the polls of a bounded wait
        return {r: status.get(r, "unfinished") for r in self.run_ids}

    def lost(self) -> int:
        """Completions in the agents' out streams (acknowledged by Redis) for these runs
        whose target the run does not record as completed."""
        client = redis.Redis.from_url(self.server.url)
        try:
            runs = {r: get_run(self.api, r) for r in self.run_ids}
            n = 0
            for agent in AGENTS:
                out = messages(client, self.keys.out(agent))
                for m in of_type(out, MessageType.STATUS_COMPLETED):
                    run = runs.get(m.get("run_id") or "")
                    if run is None:
                        continue
                    targets = run.get("cues", {}).get(m.get("cue_id"), {}).get("targets", {})
                    n += targets.get(agent) != "completed"
            return n
        finally:
            client.close()


@dataclass
class Outcome:
    """How the runs of a loss row ended after its fault: what the row's figure reports."""

    status: dict[str, str]  # run id -> final status ("unfinished" past the deadline)
    took_s: float  # from the fault's end to the last run's end (or the deadline)
    lost: int  # completions Redis acknowledged that no run recorded
    log: str  # the hub's whole log

    @property
    def finished(self) -> int:
        return sum(s == "success" for s in self.status.values())

    def figures(self) -> tuple[dict[str, str], float, int, str, int]:
        """(status, took_s, lost, log, finished): what a row reports and asserts."""
        return self.status, self.took_s, self.lost, self.log, self.finished


def outcome(w: Workload, since: float, timeout_s: float = 40) -> Outcome:
    """Wait for the runs to finish, then count what was lost (`since`: the fault's end)."""
    status = w.wait_finished(timeout_s)
    return Outcome(status, time.monotonic() - since, w.lost(), hub_log(w))


@contextmanager
def workload(server: EmbeddedServer, tmp_path: Path, **env: str) -> Iterator[Workload]:
    env = child_env(
        server, CALLBOARD_LEASE_MS="1500", CALLBOARD_MIN_IDLE_MS="1000",
        CALLBOARD_COMMAND_TIMEOUT_S="3", **env,
    )  # fmt: skip
    procs = Procs(env, tmp_path)
    try:
        url = procs.hub()
        for agent in AGENTS:
            procs.echo(agent)
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, AGENTS)
            submit(api, CUELIST)
            yield Workload(procs, api, url, Keys(env["CALLBOARD_PREFIX"]), server)
    finally:
        procs.stop()


def hub_log(w: Workload) -> str:
    """The whole log of the workload's hub (Procs.log keeps only its tail)."""
    path = w.procs.log_dir / f"hub-{w.url.rsplit(':', 1)[1]}.log"
    return path.read_text(errors="replace")


def health(url: str) -> tuple[int, dict[str, Any]]:
    try:
        r = httpx.get(f"{url}/healthz", timeout=3)
    except httpx.HTTPError:
        return 0, {}
    return r.status_code, r.json()


def mid_run(w: Workload) -> None:
    eventually_sync(w.running, 20, interval_s=0.05, message="runs under way")
