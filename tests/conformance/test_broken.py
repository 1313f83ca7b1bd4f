"""The kit catches broken specialists: each deliberate flaw of the raw agent is reported by
the check it breaks, and the same agent without the flaw passes everything."""

from __future__ import annotations

import pytest

from callboard.conformance import ALL_CHECKS, Timing, run_kit
from callboard.embedded import EmbeddedServer
from tests.conformance.conftest import AgentStarter

pytestmark = [pytest.mark.redis, pytest.mark.slow]

# Shorter than the defaults where a flaw makes the kit wait out a deadline; generous enough
# for a loaded machine where the answer must come.
FAST = Timing(
    ack_timeout_s=3.0,
    go_timeout_s=8.0,
    settle_s=1.0,
    start_timeout_s=20.0,
    reclaim_timeout_s=4.0,
    standdown_execute_ms=1500,
)


async def test_the_raw_agent_without_a_flaw_passes_every_check(
    server: EmbeddedServer, prefix: str, raw_agent: AgentStarter
) -> None:
    report = await run_kit(
        server.url, "raw-ok", prefix=prefix, timing=FAST, start=raw_agent("raw-ok")
    )
    assert [(r.check, r.passed, r.detail) for r in report.results if not r.passed] == []
    assert [r.check for r in report.results] == list(ALL_CHECKS)
    assert "contract {'provides': ['raw_output']}" in report.results[0].detail


# (flaw, the check that must fail, words of its detail, the checks that must still pass)
BROKEN = [
    ("no-ack-warning", "acks-warning", "no ack.warning in reply", ["leaves-nothing-pending"]),
    ("never-acks", "acks-warning", "was not acknowledged (pending", ["speaks-the-protocol"]),
    ("double-execution", "executes-once-on-go", "executed more than once", ["acks-standby"]),
    ("no-dedup", "ignores-duplicate-go", "answered a copy of a GO", ["executes-once-on-go"]),
    ("wrong-reply-id", "acks-warning", "came with in_reply_to", ["leaves-nothing-pending"]),
    ("ignores-standdown", "honours-standdown", "after it was stood down", ["reports-failure"]),
    ("no-reclaim", "survives-redelivery", "no status.completed in reply", ["hands-off"]),
    ("always-ready", "reports-not-ready", "ready: true", ["acks-standby"]),
    ("no-context", "writes-context", "no task.context", ["hands-off"]),
    ("spoofs-sender", "speaks-the-protocol", "is another agent", ["acks-warning"]),
    ("no-contract", "registers", "carries no contract", []),
]


@pytest.mark.parametrize(("flaw", "check", "words", "still"), BROKEN, ids=[b[0] for b in BROKEN])
async def test_each_flaw_is_reported_by_the_check_it_breaks(
    server: EmbeddedServer,
    prefix: str,
    raw_agent: AgentStarter,
    flaw: str,
    check: str,
    words: str,
    still: list[str],
) -> None:
    agent = f"raw-{flaw}"
    report = await run_kit(
        server.url, agent, prefix=prefix, timing=FAST, only=[check, *still],
        start=raw_agent(agent, flaw),
    )  # fmt: skip
    results = {r.check: r for r in report.results}
    assert not report.passed
    assert check == "registers" or results["registers"].passed, results["registers"].detail
    assert not results[check].passed
    assert words in results[check].detail
    for name in still:
        assert results[name].passed, (name, results[name].detail)


async def test_entries_left_pending_are_listed_at_the_end(
    server: EmbeddedServer, prefix: str, raw_agent: AgentStarter
) -> None:
    report = await run_kit(
        server.url, "raw-lazy", prefix=prefix, timing=FAST,
        only=["acks-warning", "leaves-nothing-pending"], start=raw_agent("raw-lazy", "never-acks"),
    )  # fmt: skip
    last = report.results[-1]
    assert (last.check, last.passed) == ("leaves-nothing-pending", False)
    assert "1 inbox entries pending" in last.detail and "delivered 1x" in last.detail
