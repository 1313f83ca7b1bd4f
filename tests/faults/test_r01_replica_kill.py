"""Row 1: kill -9 one of three replicas with 100 tasks in flight. Every task completes, the
dead replica's tasks are reclaimed within the idle limit (plus one claim interval), and no
side effect guarded by a done-marker happens twice."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from protocols.keys import Keys
from protocols.messages import MessageType
from tests.e2e.procs import Procs
from tests.faults.agents import effects_key
from tests.faults.conftest import ON_BOTH, Figure, Server
from tests.faults.tools import assign, entry_ms, messages, of_type, spawn_agent, sync_client
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENT = "fx-replicas"
TASKS = 100
MIN_IDLE_MS = 1000
CLAIM_MS = 200
SLACK_MS = 300  # scheduling on a busy 2-core box


@ON_BOTH
def test_kill_one_of_three_replicas_with_100_tasks_in_flight(
    procs: Procs, server: Server, figure: Figure
) -> None:
    keys = Keys(procs.env["CALLBOARD_PREFIX"])
    r = sync_client(server)
    out = keys.out(AGENT)
    replicas = {
        name: spawn_agent(procs, AGENT, name, CALLBOARD_CONCURRENCY=str(TASKS))
        for name in ("r1", "r2", "r3")
    }
    eventually_sync(
        lambda: len(of_type(messages(r, out), MessageType.STATUS_ONLINE)) == 3,
        30, message="three replicas online",
    )  # fmt: skip
    pipe = r.pipeline(transaction=False)
    for i in range(TASKS):
        pipe.xadd(keys.inbox(AGENT), {"m": assign(AGENT, "row1", f"T{i:03}", execute_ms=4000)})
    pipe.execute()
    fx = effects_key(keys, AGENT)
    eventually_sync(lambda: r.hlen(fx) == TASKS, 20, message="every side effect done once")
    started = of_type(messages(r, out), MessageType.STATUS_STARTED)
    by_replica = Counter(m["payload"]["replica"] for m in started)
    victim, held = by_replica.most_common(1)[0]
    orphans = {m["cue_id"] for m in started if m["payload"]["replica"] == victim}
    killed_ms = time.time() * 1000
    replicas[victim].send_signal(signal.SIGKILL)
    replicas[victim].wait(10)

    def all_completed() -> list[tuple[str, dict[str, object]]] | None:
        rows = messages(r, out)
        done = {m["cue_id"] for m in of_type(rows, MessageType.STATUS_COMPLETED)}
        return rows if len(done) == TASKS else None

    rows = eventually_sync(all_completed, 30, interval_s=0.1, message="all tasks completed")
    reclaimed_ms: dict[str, float] = {}
    for entry_id, m in rows:
        if (
            m["message_type"] == MessageType.STATUS_STARTED.value
            and m["payload"]["replica"] != victim
            and m["cue_id"] in orphans
        ):
            reclaimed_ms.setdefault(m["cue_id"], entry_ms(entry_id) - killed_ms)
    effects = {k.decode(): int(v) for k, v in r.hgetall(fx).items()}
    completed = Counter(m["cue_id"] for m in of_type(rows, MessageType.STATUS_COMPLETED))
    worst_ms = max(reclaimed_ms.values(), default=float("nan"))
    limit_ms = MIN_IDLE_MS + CLAIM_MS + SLACK_MS
    figure(
        row=1,
        fault="kill -9 one of 3 replicas, 100 tasks in flight",
        promise=f"all complete; each reclaimed <= idle limit {MIN_IDLE_MS} ms + claim "
        f"interval {CLAIM_MS} ms (+{SLACK_MS} ms slack); no side effect twice",
        measured=f"{len(completed)}/{TASKS} completed; {held} orphaned, reclaimed after "
        f"{min(reclaimed_ms.values(), default=0):.0f}-{worst_ms:.0f} ms; "
        f"side effects max {max(effects.values())} per task",
    )
    assert set(completed) == {f"T{i:03}" for i in range(TASKS)}
    assert set(reclaimed_ms) == orphans, "every orphan was picked up by a live replica"
    assert worst_ms <= limit_ms, reclaimed_ms
    twice = {k: v for k, v in effects.items() if v != 1}
    assert len(effects) == TASKS and not twice, (twice, orphans, victim)
    r.close()
