"""Row 2: a slow but alive replica (work lasting 3x the idle limit) keeps its claim: nobody
steals it. The control run, with claim renewal switched off, shows the check can fail."""

from __future__ import annotations

import pytest
import redis

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from protocols.messages import MessageType
from tests.e2e.procs import Procs
from tests.faults.agents import execs_key
from tests.faults.conftest import Figure
from tests.faults.tools import assign, messages, of_type, spawn_agent
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

MIN_IDLE_MS = 1000
WORK_MS = 3 * MIN_IDLE_MS
CASES = {  # agent -> the holder's class
    "fx-slow": "tests.faults.agents:Effects",
    "fx-slow-ctl": "tests.faults.agents:NoRenew",
}


def test_slow_replica_keeps_its_claim_and_the_control_loses_it(
    procs: Procs, redis_server: EmbeddedServer, figure: Figure
) -> None:
    keys = Keys(procs.env["CALLBOARD_PREFIX"])
    r = redis.Redis.from_url(redis_server.url)
    # The holder starts alone and takes the task; the would-be thief (a plain replica,
    # which reclaims idle entries) joins once the work is under way.
    for agent, cls in CASES.items():
        spawn_agent(procs, agent, "a", cls)
    for agent in CASES:
        eventually_sync(
            lambda a=agent: of_type(messages(r, keys.out(a)), MessageType.STATUS_ONLINE),
            30, message=f"{agent} holder online",
        )  # fmt: skip
        r.xadd(keys.inbox(agent), {"m": assign(agent, "row2", "SLOW", execute_ms=WORK_MS)})
    for agent in CASES:
        eventually_sync(
            lambda a=agent: of_type(messages(r, keys.out(a)), MessageType.STATUS_STARTED),
            10, message=f"{agent} started the work",
        )  # fmt: skip
        spawn_agent(procs, agent, "b", "tests.faults.agents:Effects")

    def completed(agent: str) -> bool:
        return bool(of_type(messages(r, keys.out(agent)), MessageType.STATUS_COMPLETED))

    eventually_sync(lambda: all(completed(a) for a in CASES), 20, message="both completed")
    execs = {a: int(r.hget(execs_key(keys, a), "row2:SLOW") or 0) for a in CASES}
    replicas = {
        a: sorted(
            {
                m["payload"]["replica"]
                for m in of_type(messages(r, keys.out(a)), MessageType.STATUS_STARTED)
            }
        )
        for a in CASES
    }
    figure(
        row=2,
        fault=f"work lasting {WORK_MS} ms = 3x the {MIN_IDLE_MS} ms idle limit, 2 replicas",
        promise="no steal: executed once, by the holder; control without renewal is stolen",
        measured=f"executed {execs['fx-slow']}x by {replicas['fx-slow']}; control "
        f"(no renewal): executed {execs['fx-slow-ctl']}x by {replicas['fx-slow-ctl']}",
    )
    assert execs["fx-slow"] == 1 and len(replicas["fx-slow"]) == 1
    assert execs["fx-slow-ctl"] >= 2, "the control run must show a steal"
    r.close()
