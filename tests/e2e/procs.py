"""Real processes for API and end-to-end tests: the hub (`-m hub.main`) and echo specialists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from callboard.embedded import EmbeddedServer, free_port
from callboard.embedded_cluster import EmbeddedCluster
from tests.helpers import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0


def child_env(
    server: EmbeddedServer | EmbeddedCluster, prefix: str | None = None, **extra: str
) -> dict[str, str]:
    """Environment for a hub or specialist on `server` (one server or a cluster) under its
    own key prefix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    env.pop("REDIS_URL", None)
    env.update(
        REDIS_URL=server.url,
        CALLBOARD_PREFIX=prefix or f"t{uuid.uuid4().hex[:10]}:",
        PYTHONUNBUFFERED="1",
        CALLBOARD_BLOCK_MS="200",
        CALLBOARD_CLAIM_INTERVAL_MS="200",
    )
    env.update(extra)
    return env


class Procs:
    """Processes one test module started; `stop()` ends them all (SIGTERM, then SIGKILL)."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                argv, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
            )
        self.procs.append(proc)
        return proc

    def hub(self, port: int | None = None, **env: str) -> str:
        """Start a hub; returns its base URL once /healthz answers 200."""
        port = port or free_port()
        proc = self.spawn(
            f"hub-{port}", [sys.executable, "-m", "hub.main", "--port", str(port)], **env
        )
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            assert proc.poll() is None, f"hub exited: {self.log(f'hub-{port}')}"
            try:
                return httpx.get(f"{url}/healthz", timeout=1.0).json().get("leader") is True
            except httpx.HTTPError:
                return False

        eventually_sync(healthy, START_TIMEOUT_S, interval_s=0.05, message="hub up and leading")
        return url

    def echo(self, agent: str, **env: str) -> subprocess.Popen[bytes]:
        return self.specialist("echo", agent, **env)

    def specialist(self, kind: str, agent: str, **env: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "callboard.specialist_cmd", kind, "--agent", agent]
        return self.spawn(f"{kind}-{agent}-{len(self.procs)}", argv, **env)

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


@contextmanager
def processes(env: dict[str, str], log_dir: Path) -> Iterator[Procs]:
    procs = Procs(env, log_dir)
    try:
        yield procs
    finally:
        procs.stop()


def wait_online(
    client: httpx.Client, agents: list[str], timeout_s: float = START_TIMEOUT_S
) -> None:
    # registered (status.online routed): Redis 7.0 lists a consumer only once it read
    # something, so `online` (from consumer idle times) may lag for an idle replica
    def registered() -> bool:
        seen = {a["agent"] for a in client.get("/v1/agents").json()["data"] if a["replicas"]}
        return set(agents) <= seen

    eventually_sync(registered, timeout_s, interval_s=0.05, message=f"agents {agents} registered")


def wait_done(client: httpx.Client, run_id: str, timeout_s: float = 30.0) -> dict[str, object]:
    done = ("success", "partial", "failed", "cancelled", "dry")

    def finished() -> dict[str, object] | None:
        run: dict[str, object] = client.get(f"/v1/runs/{run_id}").json()
        return run if run["status"] in done else None

    found = eventually_sync(finished, timeout_s, interval_s=0.05, message=f"run {run_id} done")
    assert found is not None  # eventually_sync returns only a truthy value
    return found


def sse_events(
    client: httpx.Client, run_id: str, timeout_s: float = 30.0
) -> list[dict[str, object]]:
    """Every event of the run's stream, until the hub ends it (the run finished)."""
    from callboard.client import parse_sse

    deadline = time.monotonic() + timeout_s
    out = []
    timeout = httpx.Timeout(timeout_s)
    with client.stream("GET", f"/v1/runs/{run_id}/events", timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for name, data in parse_sse(response.iter_lines()):
            assert time.monotonic() < deadline, "event stream did not end in time"
            out.append({"event": name, **data})
    return out
