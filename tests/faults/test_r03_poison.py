"""Row 3: poison messages beside 1,000 healthy ones. One kills the replica that takes it,
every time; one makes the handler raise every time. Each is dead-lettered after exactly
`max_deliveries` deliveries (tries), with the reason; all 1,000 healthy ones complete. The
replica asks the hub for each dead letter (`status.rejected`); the hub copies the entry."""

from __future__ import annotations

from collections import Counter

import pytest

from protocols.keys import Keys
from protocols.messages import MessageType
from tests.e2e.procs import Procs
from tests.faults.agents import EXIT_CODE, execs_key
from tests.faults.conftest import ON_BOTH, Figure, Server
from tests.faults.tools import assign, dead_letters, messages, of_type, spawn_agent, sync_client
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENT = "fx-poison"
HEALTHY = 1000
MAX_DELIVERIES = 3
DEADLINE_S = 120  # a deadline, not a wait: a loaded 2-core CI once needed more than 60 s


@ON_BOTH
def test_poison_is_dead_lettered_after_max_deliveries_and_healthy_work_completes(
    procs: Procs, server: Server, figure: Figure
) -> None:
    keys = Keys(procs.env["CALLBOARD_PREFIX"])
    r = sync_client(server)
    procs.hub()  # a replica asks the hub to dead-letter (it may write only its out stream)
    env = {"CALLBOARD_MAX_DELIVERIES": str(MAX_DELIVERIES), "CALLBOARD_CONCURRENCY": "50"}
    live = {name: spawn_agent(procs, AGENT, name, **env) for name in ("r0", "r1")}
    born = len(live)
    # RAISE first, among the first half of the healthy work; EXIT, among the second half,
    # only once RAISE is dead-lettered: a replica the EXIT poison kills while it is retrying
    # RAISE takes its tries with it (the next replica counts from the deliveries), which
    # would measure that crash, not the retry limit (see RELIABILITY.md, row 3).
    first = [assign(AGENT, "row3", f"H{i:04}") for i in range(HEALTHY // 2)]
    first.insert(HEALTHY // 10, assign(AGENT, "row3", "RAISE", poison="retry"))
    second = [assign(AGENT, "row3", f"H{i:04}") for i in range(HEALTHY // 2, HEALTHY)]
    second.insert(0, assign(AGENT, "row3", "EXIT", poison="exit", crash_after_ms=300))

    def queue(tasks: list[bytes]) -> None:
        pipe = r.pipeline(transaction=False)
        for raw in tasks:
            pipe.xadd(keys.inbox(AGENT), {"m": raw})
        pipe.execute()

    queue(first)
    eventually_sync(lambda: len(dead_letters(r, keys)) >= 1, DEADLINE_S, interval_s=0.1,
                    message="RAISE dead-lettered")  # fmt: skip
    queue(second)

    crashes = 0

    def supervise() -> list[tuple[str, dict[str, object]]] | None:
        """Restart a replica the poison killed; done when all is settled."""
        nonlocal crashes, born
        for name, proc in list(live.items()):
            if proc.poll() is not None:
                assert proc.returncode == EXIT_CODE, procs.log(f"{AGENT}-{name}")
                crashes += 1
                assert crashes <= MAX_DELIVERIES + 1, "poison delivered too often"
                del live[name]
                live[f"r{born}"] = spawn_agent(procs, AGENT, f"r{born}", **env)
                born += 1
        rows = messages(r, keys.out(AGENT))
        done = {m["cue_id"] for m in of_type(rows, MessageType.STATUS_COMPLETED)}
        settled = len(done) >= HEALTHY and len(dead_letters(r, keys)) >= 2
        return rows if settled else None

    rows = eventually_sync(supervise, DEADLINE_S, interval_s=0.1, message="poison settled")
    letters = {letter["entry_id"]: letter for letter in dead_letters(r, keys)}
    inbox = {entry_id: m["cue_id"] for entry_id, m in messages(r, keys.inbox(AGENT))}
    by_cue = {inbox[entry_id]: letter for entry_id, letter in letters.items()}
    execs = {k.decode(): int(v) for k, v in r.hgetall(execs_key(keys, AGENT)).items()}
    done_count = Counter(m["cue_id"] for m in of_type(rows, MessageType.STATUS_COMPLETED))
    exit_letter, raise_letter = by_cue.get("EXIT", {}), by_cue.get("RAISE", {})
    figure(
        row=3,
        fault=f"poison (process exits / handler raises every time) beside {HEALTHY} healthy",
        promise=f"dead-lettered after exactly max_deliveries={MAX_DELIVERIES}; "
        f"all {HEALTHY} healthy complete",
        measured=f"exit-poison: {crashes} crashes, dead letter deliveries="
        f"{exit_letter.get('deliveries')} ({exit_letter.get('reason')!r}); raise-poison: "
        f"{execs.get('row3:RAISE')} tries ({raise_letter.get('reason')!r}); "
        f"healthy completed {len([c for c in done_count if c.startswith('H')])}/{HEALTHY}",
    )
    assert sorted(by_cue) == ["EXIT", "RAISE"], by_cue
    assert crashes == MAX_DELIVERIES
    assert execs["row3:EXIT"] == MAX_DELIVERIES
    assert exit_letter["deliveries"] == str(MAX_DELIVERIES)
    assert exit_letter["reason"] == f"rejected by {AGENT}: poison: delivered {MAX_DELIVERIES} times"
    assert exit_letter["stream"] == keys.inbox(AGENT) and exit_letter["sender"] == AGENT
    assert execs["row3:RAISE"] == MAX_DELIVERIES
    assert raise_letter["reason"].startswith(
        f"rejected by {AGENT}: gave up after {MAX_DELIVERIES} tries"
    )
    assert {f"H{i:04}" for i in range(HEALTHY)} <= set(done_count)
    r.close()
