"""`callboard up`: a local cluster: embedded server (unless REDIS_URL), hub, echo specialists.

Each piece is its own process. It submits the example cuelists, runs the demo with a live
table, prints where the API is, and stays up until Ctrl-C / SIGTERM, then stops every
process it started (specialists first, then the hub, then the server).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from callboard.client import ApiError, Client, Unreachable
from callboard.commands.live import watch
from callboard.embedded import EmbeddedServer

console = Console()
PACKAGE_CUELISTS = Path(__file__).resolve().parents[1] / "cuelists"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def agents_of(paths: list[Path]) -> list[str]:
    """Every agent the cuelists name: cue targets, handoff receivers, inline contracts."""
    found: dict[str, None] = {}
    for path in paths:
        doc = yaml.safe_load(path.read_text()) or {}
        for agent in doc.get("specialists") or {}:
            found[agent] = None
        for cue in doc.get("cues") or []:
            for agent in cue.get("target_agents") or []:
                found[agent] = None
            to = (cue.get("handoff") or {}).get("to")
            if to:
                found[to] = None
    return list(found)


class Cluster:
    """The processes `up` started, stopped in reverse order."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.server: EmbeddedServer | None = None

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(
            argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.procs.append((name, proc))
        return proc

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs if proc.poll() is not None]

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if self.server is not None:
            self.server.close()
            self.server = None


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _wait_ready(client: Client, cluster: Cluster, agents: list[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not client.healthy():
        if cluster.dead() or time.monotonic() > deadline:
            raise RuntimeError(f"the hub did not come up; see {cluster.log_dir}/hub.log")
        time.sleep(0.1)
    while time.monotonic() < deadline:  # nicer demo: every specialist registered
        registered = {a["agent"] for a in client.agents() if a["replicas"]}
        if set(agents) <= registered:
            return
        time.sleep(0.1)


def up(
    port: Annotated[int, typer.Option(help="the hub's API port")] = 8080,
    cuelists: Annotated[Path | None, typer.Option(help="folder of example cuelists")] = None,
    demo: Annotated[str, typer.Option(help="the cuelist file to run as the demo")] = "demo.yaml",
    exit_after_demo: Annotated[bool, typer.Option("--exit-after-demo")] = False,
    redis_url: Annotated[str | None, typer.Option(envvar="REDIS_URL", hidden=True)] = None,
) -> None:
    """A local cluster running the demo cuelist; Ctrl-C stops everything it started."""
    folder = cuelists or (Path("cuelists") if Path("cuelists").is_dir() else PACKAGE_CUELISTS)
    files = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    if not files:
        console.print(f"[red]error:[/] no cuelists in {folder}")
        raise typer.Exit(2)
    demo_file = next((f for f in files if f.name == demo), files[0])
    agents = agents_of(files)
    log_dir = Path(tempfile.mkdtemp(prefix="callboard-up-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cluster = Cluster(log_dir, env)
    signal.signal(signal.SIGTERM, _interrupt)
    url = f"http://127.0.0.1:{port}"
    status = "failed"
    try:
        if not redis_url:
            cluster.server = EmbeddedServer(appendonly=True).start()
            redis_url = cluster.server.url
            console.print(f"embedded server {cluster.server.binary} at {redis_url}")
        env["REDIS_URL"] = redis_url
        cluster.spawn("hub", [sys.executable, "-m", "hub.main", "--port", str(port)])
        for agent in agents:
            argv = [sys.executable, "-m", "callboard.specialist_cmd", "echo", "--agent", agent]
            cluster.spawn(f"specialist-{agent}", argv)
        console.print(f"hub and {len(agents)} specialists starting; logs in {log_dir}")
        with Client(url, os.environ.get("CALLBOARD_API_KEY")) as client:
            _wait_ready(client, cluster, agents)
            names = {}
            for path in files:
                stored = client.submit(path.read_text())
                names[path] = stored["name"]
                console.print(f"submitted {stored['name']} {stored['version'][:12]}")
            run_id = client.start_run(names[demo_file])
            final = watch(client, run_id, console)
            status = final["status"]
        console.print(f"demo {names[demo_file]}: [bold]{status}[/]")
        console.print(f"API: {url}/v1   docs: {url}/docs   metrics: {url}/metrics")
        if exit_after_demo:
            raise typer.Exit(0 if status == "success" else 1)
        console.print("running; Ctrl-C stops everything")
        while not cluster.dead():
            time.sleep(0.5)
        console.print(f"[red]stopped:[/] {', '.join(cluster.dead())} exited; see {log_dir}")
        raise typer.Exit(1)
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        console.print("stopping")
    except (ApiError, Unreachable, RuntimeError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    finally:
        cluster.stop()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    typer.run(up)
