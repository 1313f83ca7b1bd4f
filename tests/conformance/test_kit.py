"""`callboard conformance` end to end: the SDK's echo specialist passes every check (started
by the kit, and already running), and the kit refuses to run where it cannot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from callboard.conformance import ALL_CHECKS, Timing, run_kit
from callboard.embedded import EmbeddedServer, free_port
from protocols.keys import HUB_GROUP, Keys
from protocols.transport import Transport
from tests.e2e.procs import Procs

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _kit(
    env: dict[str, str], *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "callboard.cli", "conformance", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)


def test_the_echo_specialist_passes_every_check(env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "echo.log"
    echo = [sys.executable, "-m", "callboard.specialist_cmd", "echo", "--agent", "echo-ok"]
    done = _kit(env, "--agent", "echo-ok", "-o", "json", "--agent-log", str(log), "--", *echo)
    assert done.returncode == 0, done.stdout + done.stderr + log.read_text()
    report = json.loads(done.stdout)  # json output: the report alone on stdout
    assert report["passed"] is True and report["agent"] == "echo-ok"
    assert [c["check"] for c in report["checks"]] == list(ALL_CHECKS)
    assert all(c["passed"] for c in report["checks"])
    assert "online" in log.read_text()  # the echo's own output went to the log, not stdout


async def test_an_agent_already_running_is_checked_too(
    redis_server: EmbeddedServer, prefix: str, procs: Procs
) -> None:
    procs.echo("echo-up")
    report = await run_kit(
        redis_server.url, "echo-up", prefix=prefix, timing=Timing(settle_s=0.5),
        only=["executes-once-on-go", "leaves-nothing-pending"],
    )  # fmt: skip
    assert [(r.check, r.passed) for r in report.results] == [
        ("registers", True), ("executes-once-on-go", True), ("leaves-nothing-pending", True),
    ]  # fmt: skip


def test_a_table_by_default_and_exit_1_when_a_check_fails(env: dict[str, str]) -> None:
    done = _kit(env, "--agent", "nobody-home", "--start-timeout-s", "0.5", "--only", "acks-warning")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("FAIL  registers") and "no status.online within 0.5s" in lines[1]
    assert lines[2].startswith("FAIL  acks-warning") and "not run" in lines[2]
    assert lines[-1] == "0 of 2 behaviours hold"


def test_an_agent_that_dies_before_registering_is_reported_at_once(env: dict[str, str]) -> None:
    crash = [sys.executable, "-c", "import sys; sys.exit(3)"]
    done = _kit(env, "--agent", "crashes", "--only", "acks-warning", "--", *crash, timeout_s=20)
    assert done.returncode == 1
    assert "the agent exited (code 3) before it registered" in done.stdout


async def test_it_will_not_run_where_a_hub_reads_the_agent(
    env: dict[str, str], redis_server: EmbeddedServer, keys: Keys
) -> None:
    transport = Transport.from_url(redis_server.url, keys)
    await transport.ensure_group(keys.out("busy"), HUB_GROUP)
    await transport.close()
    done = _kit(env, "--agent", "busy")
    assert done.returncode == 2
    assert "a hub reads" in done.stderr and "prefix" in done.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--agent", "Not An Id"], "is not an agent id"),
        (["--agent", "a", "--only", "nope"], "unknown checks ['nope']"),
        (["--agent", "a", "-o", "yaml"], "-o takes json or table"),
        (["--agent", "a", "--", "/no/such/agent-binary"], "cannot start /no/such/agent-binary"),
    ],
)
def test_unusable_input_exits_2(env: dict[str, str], args: list[str], words: str) -> None:
    done = _kit(env, *args)
    assert done.returncode == 2 and words in done.stderr, done.stderr


def test_no_server_exits_2(env: dict[str, str]) -> None:
    dead = {**env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    done = _kit(dead, "--agent", "a")
    assert done.returncode == 2 and "cannot use Redis" in done.stderr, done.stderr
