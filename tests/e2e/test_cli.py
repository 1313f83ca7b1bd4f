"""The API-client commands against a real hub: a run driven from submit to success with
the CLI alone (`-o json` parsed), id prefixes, exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from callboard.commands import register
from callboard.embedded import EmbeddedServer, free_port
from tests.e2e.procs import child_env, processes, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
KEY = "cli-key"
GOOD = """
cuelist: cli-good
cues:
  - id: CUE-1
    target_agents: [cli-agent]
    auto_follow: CUE-2
  - id: CUE-2
    target_agents: [cli-agent]
"""
FAILING = """
cuelist: cli-failing
cues:
  - id: CUE-1
    target_agents: [cli-agent]
    action: {fail: true}
"""
MANUAL = """
cuelist: cli-manual
cues:
  - id: CUE-1
    target_agents: [cli-agent]
    manual: true
"""


@pytest.fixture(scope="module")
def url(redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = child_env(redis_server, CALLBOARD_API_KEY=KEY)
    with processes(env, tmp_path_factory.mktemp("cli")) as procs:
        base = procs.hub()
        procs.echo("cli-agent")
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}) as c:
            wait_online(c, ["cli-agent"])
        yield base


@pytest.fixture
def cli(url: str, tmp_path: Path) -> Iterator[tuple[CliRunner, typer.Typer]]:
    app = typer.Typer()
    register(app)
    env = {
        "CALLBOARD_API_KEY": KEY, "CALLBOARD_URL": url, "CALLBOARD_PROFILE": "",
        "CALLBOARD_CONFIG": str(tmp_path / "no-profiles.toml"),
    }  # fmt: skip
    yield CliRunner(env=env), app


def invoke(cli: tuple[CliRunner, typer.Typer], *args: str) -> tuple[int, str]:
    runner, app = cli
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_submit_run_watch_status(cli: tuple[CliRunner, typer.Typer], tmp_path: Path) -> None:
    for name, text in (("good.yaml", GOOD), ("failing.yaml", FAILING), ("manual.yaml", MANUAL)):
        (tmp_path / name).write_text(text)
        code, out = invoke(cli, "submit", str(tmp_path / name))
        assert code == 0, out
        assert "stored" in out
    code, out = invoke(cli, "run", "cli-good", "--watch")
    assert code == 0, out
    assert "success" in out and "CUE-2" in out
    code, out = invoke(cli, "run", "cli-failing", "--watch")
    assert code == 1, out
    assert "failed" in out
    code, out = invoke(cli, "run", "cli-good", "--dry")
    assert code == 0, out
    assert "CUE-1 -> CUE-2" in out
    code, out = invoke(cli, "status")
    assert code == 0 and "cli-good" in out
    run_id = invoke(cli, "run", "cli-good")[1].strip()
    code, out = invoke(cli, "status", run_id)
    assert code == 0 and "CUE-1" in out


def test_go(cli: tuple[CliRunner, typer.Typer], tmp_path: Path, url: str) -> None:
    (tmp_path / "manual.yaml").write_text(MANUAL)
    assert invoke(cli, "submit", str(tmp_path / "manual.yaml"))[0] == 0
    run_id = invoke(cli, "run", "cli-manual")[1].strip()
    headers = {"Authorization": f"Bearer {KEY}"}

    def armed() -> bool:
        run = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers).json()
        return bool(run["cues"]["CUE-1"]["state"] == "armed")

    eventually_sync(armed, 10, interval_s=0.05)
    code, out = invoke(cli, "go", run_id, "CUE-1")
    assert code == 0, out
    code, out = invoke(cli, "go", run_id, "CUE-1")
    assert code == 1 and "409" in out  # already done: refused with the reason


def test_exit_codes_for_bad_input(cli: tuple[CliRunner, typer.Typer], tmp_path: Path) -> None:
    assert invoke(cli, "submit", str(tmp_path / "missing.yaml"))[0] == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "cuelist: cli-bad\ncues:\n  - id: CUE-1\n    target_agents: [a]\n    colour: x\n"
    )
    code, out = invoke(cli, "submit", str(bad))
    assert code == 1 and "CUE-1" in out
    assert invoke(cli, "run", "no-such-cuelist")[0] == 1
    code, out = invoke(cli, "status", "no-such-run")
    assert code == 2 and "no run id starts with 'no-such-run'" in out  # not a prefix of any
    assert invoke(cli, "status", "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b")[0] == 1  # hub: 404
    assert invoke(cli, "status", "--url", f"http://127.0.0.1:{free_port()}")[0] == 2
    code, out = invoke(cli, "status", "--api-key", "wrong")
    assert code == 1 and "401" in out


APPROVE = """
cuelist: cli-approve
cues:
  - id: BUILD
    target_agents: [cli-agent]
    action: {context: {build_id: b-7}}
  - id: TEST
    target_agents: [cli-agent]
    depends_on: [BUILD]
    conditions: [approval_received]
  - id: DEPLOY
    target_agents: [cli-agent]
    depends_on: [TEST]
    manual: true
"""
GHOST = """
cuelist: cli-ghost
cues:
  - id: CALL
    target_agents: [cli-ghost]
    ack_timeout_s: 1
    retries: 100
"""


def as_json(cli: tuple[CliRunner, typer.Typer], *args: str, code: int = 0) -> Any:
    runner, app = cli
    result = runner.invoke(app, [*args, "-o", "json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_a_run_from_submit_to_success_with_the_cli_alone(
    cli: tuple[CliRunner, typer.Typer], tmp_path: Path
) -> None:
    (tmp_path / "approve.yaml").write_text(APPROVE)
    assert as_json(cli, "submit", str(tmp_path / "approve.yaml"))["name"] == "cli-approve"
    run_id = as_json(cli, "run", "cli-approve")["run_id"]
    prefix = run_id[:-6]  # every command below names the run by a prefix of its id

    def cue_state(cue: str) -> str:
        return str(as_json(cli, "status", prefix)["cues"][cue]["state"])

    eventually_sync(lambda: cue_state("TEST") == "waiting", 20, interval_s=0.1)
    assert as_json(cli, "condition", prefix, "approval_received")["conditions"] == [
        "approval_received"
    ]
    eventually_sync(lambda: cue_state("DEPLOY") == "armed", 20, interval_s=0.1)
    assert as_json(cli, "go", prefix, "DEPLOY")["cue"] == "DEPLOY"
    runner, app = cli
    followed = runner.invoke(app, ["events", prefix, "-o", "json"])  # until the run ends
    assert followed.exit_code == 0, followed.output
    events = [json.loads(line) for line in followed.stdout.splitlines()]
    assert events[-1]["event"] == "run" and events[-1]["data"]["status"] == "success"
    assert {"condition", "go"} <= {e["event"] for e in events}
    assert as_json(cli, "context", prefix)["entries"]["build_id"]["value"] == "b-7"
    listed = as_json(cli, "runs", "--cuelist", "cli-approve", "--status", "success")
    assert run_id in [r["run_id"] for r in listed["data"]]
    assert {r["cuelist"] for r in listed["data"]} == {"cli-approve"}
    assert "cli-approve" in [c["name"] for c in as_json(cli, "cuelists")["data"]]
    assert "cli-agent" in [a["agent"] for a in as_json(cli, "agents")["data"]]


def test_cancel_and_escalations_with_the_cli(
    cli: tuple[CliRunner, typer.Typer], tmp_path: Path
) -> None:
    (tmp_path / "manual.yaml").write_text(MANUAL)
    (tmp_path / "ghost.yaml").write_text(GHOST)
    for name in ("manual.yaml", "ghost.yaml"):
        as_json(cli, "submit", str(tmp_path / name))
    waiting = as_json(cli, "run", "cli-manual")["run_id"]
    assert as_json(cli, "cancel", waiting[:-6], "--reason", "not today")["status"] == "cancelled"
    assert as_json(cli, "status", waiting)["status"] == "cancelled"
    runner, app = cli
    again = runner.invoke(app, ["cancel", waiting])
    assert again.exit_code == 1 and "already cancelled" in again.output

    ghost = as_json(cli, "run", "cli-ghost")["run_id"]  # nobody answers: it times out

    def raised() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = as_json(cli, "escalations", "--run", ghost[:-6])["data"]
        return found

    [esc] = eventually_sync(raised, 20, interval_s=0.1)
    assert esc["type"] == "escalation.timeout" and esc["cue_id"] == "CALL"
    resolved = as_json(cli, "escalations", "resolve", esc["id"][:-6], "--note", "agent is gone")
    assert resolved["status"] == "resolved"
    assert resolved["resolution"]["note"] == "agent is gone"
    assert as_json(cli, "escalations", "--status", "resolved", "--run", ghost)["count"] == 1
    assert as_json(cli, "cancel", ghost[:-6])["status"] == "cancelled"


WHOLE = """
cuelist: cli-whole
cues:
  - id: BUILD
    target_agents: [cli-agent]
    action: {fail: once, context: {build_id: b-9}, result: {artifact: app.tar}}
  - id: TEST
    target_agents: [cli-agent]
    depends_on: [BUILD]
    conditions: [approval_received]
  - id: DEPLOY
    target_agents: [cli-agent]
    depends_on: [TEST]
    manual: true
"""


def test_submit_to_success_with_the_cli_alone_retry_approve_go_cancel_escalations(
    cli: tuple[CliRunner, typer.Typer], tmp_path: Path
) -> None:
    """Issue 13's CLI test: a run from submit to success with the CLI alone (its first
    build fails: retry; an approval; a GO), and beside it a run whose agent never answers
    (its escalation resolved, the run cancelled). Every answer is `-o json`, parsed."""
    (tmp_path / "whole.yaml").write_text(WHOLE)
    (tmp_path / "ghost.yaml").write_text(GHOST)
    assert as_json(cli, "submit", str(tmp_path / "whole.yaml"))["name"] == "cli-whole"
    as_json(cli, "submit", str(tmp_path / "ghost.yaml"))
    run_id = as_json(cli, "run", "cli-whole")["run_id"]
    prefix = run_id[:-6]

    def run() -> dict[str, Any]:
        found: dict[str, Any] = as_json(cli, "status", prefix)
        return found

    failed = eventually_sync(lambda: run()["status"] == "failed" and run(), 20, interval_s=0.1)
    assert failed["cues"]["BUILD"]["state"] == "failed"
    assert failed["cues"]["TEST"]["state"] == "blocked"
    runner, app = cli
    # DEPLOY is blocked: retrying it retries the failure it waits on
    retried = runner.invoke(app, ["retry", prefix, "DEPLOY", "-o", "json"])
    assert retried.exit_code == 0, retried.output
    assert json.loads(retried.stdout)["retried"] == "BUILD"
    holding = eventually_sync(lambda: run()["status"] == "holding" and run(), 20, interval_s=0.1)
    assert holding["hold_reason"] == "condition approval_received"
    assert holding["cues"]["BUILD"]["result"] == {"cli-agent": {"artifact": "app.tar"}}
    again = runner.invoke(app, ["retry", prefix, "BUILD"])  # completed now: refused, why
    said = " ".join(again.output.split())  # the terminal wraps it
    assert again.exit_code == 1 and "not failed or blocked: it is completed" in said
    typo = runner.invoke(app, ["condition", prefix, "approval_recieved"])
    assert typo.exit_code == 1 and "did you mean approval_received" in " ".join(typo.output.split())
    as_json(cli, "condition", prefix, "approval_received")
    armed = eventually_sync(lambda: run()["hold_reason"] == "GO for DEPLOY", 20, interval_s=0.1)
    assert armed
    assert as_json(cli, "go", prefix, "DEPLOY")["state"] == "warning"
    followed = runner.invoke(app, ["events", prefix, "-o", "json"])  # until the run ends
    events = [json.loads(line) for line in followed.stdout.splitlines()]
    assert [e["data"]["status"] for e in events if e["event"] == "run"][-1] == "success"
    table = runner.invoke(app, ["status", run_id])  # the result, as a person sees it
    assert table.exit_code == 0 and 'cli-agent: {"artifact": "app.tar"}' in table.output

    ghost = as_json(cli, "run", "cli-ghost")["run_id"]
    [esc] = eventually_sync(
        lambda: as_json(cli, "escalations", "--run", ghost[:-6])["data"], 20, interval_s=0.1
    )
    assert as_json(cli, "escalations", "resolve", esc["id"][:-6])["status"] == "resolved"
    assert as_json(cli, "cancel", ghost[:-6])["status"] == "cancelled"


def test_rerun_delete_and_schedules_with_the_cli(
    cli: tuple[CliRunner, typer.Typer], tmp_path: Path
) -> None:
    (tmp_path / "failing.yaml").write_text(FAILING)
    as_json(cli, "submit", str(tmp_path / "failing.yaml"))
    first = as_json(cli, "run", "cli-failing", "--watch", code=1)  # it fails: exit 1
    assert first["status"] == "failed"
    runner, app = cli
    rerun = as_json(cli, "rerun", first["run_id"][:-6], "--from-failure")
    assert rerun["rerun_of"] == first["run_id"]
    eventually_sync(lambda: as_json(cli, "status", rerun["run_id"])["status"] == "failed", 20)
    assert as_json(cli, "status", first["run_id"])["reruns"] == [rerun["run_id"]]
    watched = runner.invoke(app, ["rerun", rerun["run_id"], "--watch", "-o", "json"])
    assert watched.exit_code == 1 and json.loads(watched.stdout)["rerun_of"] == rerun["run_id"]

    scheduled = FAILING.replace("cli-failing", "cli-nightly").replace(
        "cues:", 'schedule: "0 3 * * *"\ncues:'
    )
    (tmp_path / "nightly.yaml").write_text(scheduled)
    version = as_json(cli, "submit", str(tmp_path / "nightly.yaml"))["version"]
    paused = as_json(cli, "cuelists", "schedule", "pause", "cli-nightly")
    assert paused == {"name": "cli-nightly", "schedule": "0 3 * * *", "paused": True}
    assert not as_json(cli, "cuelists", "schedule", "resume", "cli-nightly")["paused"]
    deleted = as_json(cli, "cuelists", "delete", "cli-nightly", "--version", version)
    assert deleted == {"name": "cli-nightly", "deleted": [version]}
    gone = runner.invoke(app, ["cuelists", "show", "cli-nightly"])
    assert gone.exit_code == 1 and "404" in gone.output
    refused = runner.invoke(app, ["run", "cli-nightly"])
    assert refused.exit_code == 1 and "no cuelist named cli-nightly" in " ".join(
        refused.output.split()
    )
