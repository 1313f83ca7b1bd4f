"""Row 6: a specialist frozen (SIGSTOP) during WARNING. The ack deadline fires within
±0.5 s of `ack_timeout_s` (measured between the run's own events), the cue is retried, and
the frozen agent's late ack.warning for the timed-out attempt, sent after SIGCONT, changes
nothing: no GO for that attempt, no violation, the retry completes the run."""

from __future__ import annotations

import signal
from collections import Counter

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from protocols.messages import MessageType
from tests.e2e.procs import Procs, wait_done, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import entry_ms, get_run, gos, messages, run_events, start, submit
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENTS = ["fx-ack-a", "fx-ack-b"]
ACK_TIMEOUT_S = 2.0
TOLERANCE_S = 0.5
CUELIST = {
    "cuelist": "frozen-ack",
    "defaults": {"ack_timeout_s": ACK_TIMEOUT_S, "retries": 1},
    "cues": [{"id": "CALL", "target_agents": AGENTS, "action": {"execute_ms": 50}}],
}


def test_ack_deadline_fires_on_time_and_the_late_ack_changes_nothing(
    procs: Procs, redis_server: EmbeddedServer, figure: Figure
) -> None:
    keys = Keys(procs.env["CALLBOARD_PREFIX"])
    r = redis.Redis.from_url(redis_server.url)
    url = procs.hub()
    frozen = procs.echo(AGENTS[1])
    procs.echo(AGENTS[0])
    with httpx.Client(base_url=url, timeout=10) as api:
        wait_online(api, AGENTS)
        submit(api, CUELIST)
        frozen.send_signal(signal.SIGSTOP)
        try:
            run_id = start(api, "frozen-ack")
            eventually_sync(
                lambda: get_run(api, run_id).get("cues", {}).get("CALL", {}).get("attempt") == 2,
                ACK_TIMEOUT_S + 10, interval_s=0.02, message="attempt 1 timed out, retried",
            )  # fmt: skip
        finally:
            frozen.send_signal(signal.SIGCONT)
        run = wait_done(api, run_id, timeout_s=30)
    events = run_events(r, keys, run_id)
    warned = next(e for e in events if e.get("state") == "warning" and e.get("attempt") == 1)
    failed = next(e for e in events if e["type"] == "attempt_failed" and e["attempt"] == 1)
    fired_after_s = failed["at"] - warned["at"]
    late = [
        entry_ms(entry_id) / 1000 - failed["at"]
        for entry_id, m in messages(r, keys.out(AGENTS[1]))
        if m["message_type"] == MessageType.ACK_WARNING.value
        and m["run_id"] == run_id
        and m["payload"]["attempt"] == 1
    ]
    after_fail = events[events.index(failed) + 1 :]
    touched_attempt_1 = [e for e in after_fail if e.get("attempt") == 1]
    counted = gos(r, keys, AGENTS, run_id)
    late_s = late[0] if late else float("nan")
    figure(
        row=6,
        fault="SIGSTOP a specialist during WARNING; SIGCONT after the deadline",
        promise=f"ack deadline fires within ±{TOLERANCE_S} s of ack_timeout_s="
        f"{ACK_TIMEOUT_S:g} s; the late ack changes nothing",
        measured=f"deadline fired {fired_after_s:.3f} s after WARNING "
        f"(error {fired_after_s - ACK_TIMEOUT_S:+.3f} s); late ack "
        f"sent {late_s:+.2f} s after it, "
        f"events it caused: {len(touched_attempt_1)}, violations: "
        f"{run['record']['protocol_violations']}; run {run['status']} on attempt "
        f"{run['cues']['CALL']['attempt']}",
    )
    assert abs(fired_after_s - ACK_TIMEOUT_S) <= TOLERANCE_S
    assert len(late) == 1 and late[0] > 0, "the frozen agent answers the old WARNING late"
    assert touched_attempt_1 == []
    assert run["record"]["protocol_violations"] == 0
    assert run["status"] == "success" and run["cues"]["CALL"]["attempt"] == 2
    assert counted == Counter({(a, "CALL", 2): 1 for a in AGENTS})
    r.close()
