"""The API-client commands (`submit`, `run`, `go`, `status`) against a real hub: exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
def cli(url: str) -> Iterator[tuple[CliRunner, typer.Typer]]:
    app = typer.Typer()
    register(app)
    yield CliRunner(env={"CALLBOARD_API_KEY": KEY, "CALLBOARD_URL": url}), app


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
    assert invoke(cli, "status", "no-such-run")[0] == 1
    assert invoke(cli, "status", "--url", f"http://127.0.0.1:{free_port()}")[0] == 2
    code, out = invoke(cli, "status", "--api-key", "wrong")
    assert code == 1 and "401" in out
