"""`callboard up`: a local cluster: embedded server (unless REDIS_URL), hub, echo specialists.

Each piece is its own process. It refuses a port something already listens on (`--port 0`
picks a free one), talks only to the hub it started (cluster.py), keeps its state in a
data folder (`--data`, default `.callboard/`: the server's AOF and every log), says what
it is doing while it starts, submits the example cuelists, runs the demo with a live table,
prints the lines that let another shell join, and stays up until Ctrl-C / SIGTERM; then it
stops every process it started (specialists first, then the hub, then the server).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from callboard.client import ApiError, BadAnswer, Client, OutcomeUnknown, Unreachable
from callboard.cluster import Cluster, DataDir, UpError, log_name, port_taken, wait_for_own_hub
from callboard.commands.live import watch
from callboard.embedded import EmbeddedServer, free_port
from protocols.keys import DEFAULT_PREFIX
from protocols.outage import redacted

console = Console(highlight=False)
PACKAGE_CUELISTS = Path(__file__).resolve().parents[1] / "cuelists"
READY_TIMEOUT_S = 60.0


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
        for agent in debuggers_of([path]):
            found[agent] = None
    return list(found)


def debuggers_of(paths: list[Path]) -> set[str]:
    """The agents the cuelists name as a debugger (`on_repeated_failure.debugger`, in a cue
    or the defaults): `up` runs the built-in `debugger` kind for them, echo for the rest."""
    found: set[str] = set()
    for path in paths:
        doc = yaml.safe_load(path.read_text()) or {}
        for part in [doc.get("defaults") or {}, *(doc.get("cues") or [])]:
            debugger = (part.get("on_repeated_failure") or {}).get("debugger")
            if isinstance(debugger, str):
                found.add(debugger)
    return found


def contracts_of(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """What the cuelists' inline contracts (`specialists:`) say each agent provides and its
    labels (every file's, merged): `up` starts the agent saying so, so a `target:
    {provides: ...}` or a filter on labels finds it (cuelists/by-capability.yaml). Only
    these two: what an agent requires would change how handoffs to it are checked."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        doc = yaml.safe_load(path.read_text()) or {}
        for agent, contract in (doc.get("specialists") or {}).items():
            if not isinstance(contract, dict):
                continue
            mine = found.setdefault(agent, {"provides": [], "labels": {}})
            given = contract.get("provides") or []
            mine["provides"] += [p for p in given if p not in mine["provides"]]
            mine["labels"].update(contract.get("labels") or {})
    return found


def echo_argv(agent: str, contracts: dict[str, dict[str, Any]]) -> list[str]:
    """The command line of the echo specialist serving `agent`, with what the cuelists'
    inline contracts say it provides and its labels."""
    argv = [sys.executable, "-m", "callboard.specialist_cmd", "echo", "--agent", agent]
    contract = contracts.get(agent) or {}
    if contract.get("provides"):
        argv += ["--provides", ",".join(dict.fromkeys(contract["provides"]))]
    if contract.get("labels"):
        argv += ["--labels", ",".join(f"{k}={_label(v)}" for k, v in contract["labels"].items())]
    return argv


def _label(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def join_lines(redis_url: str, url: str, prefix: str) -> list[str]:
    """What a user pastes into another shell to join this cluster."""
    return [
        f"export REDIS_URL={redis_url} CALLBOARD_URL={url} CALLBOARD_API_URL={url} "
        f"CALLBOARD_PREFIX={prefix}",
        "callboard specialist mymodule:MyClass --agent my-agent   # your own specialist",
    ]


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _wait_registered(client: Client, cluster: Cluster, agents: list[str]) -> None:
    """A nicer demo: every specialist registered before the first run."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and not cluster.dead():
        registered = {a["agent"] for a in client.agents() if a["replicas"]}
        if set(agents) <= registered:
            return
        time.sleep(0.1)


def up(
    port: Annotated[
        int, typer.Option(help="the hub's API port; 0 picks a free one", min=0, max=65535)
    ] = 8080,
    data: Annotated[
        Path, typer.Option(help="state (the server's AOF) and logs, kept between runs")
    ] = Path(".callboard"),
    cuelists: Annotated[Path | None, typer.Option(help="folder of example cuelists")] = None,
    demo: Annotated[str, typer.Option(help="the cuelist file to run as the demo")] = "demo.yaml",
    exit_after_demo: Annotated[bool, typer.Option("--exit-after-demo")] = False,
    redis_url: Annotated[str | None, typer.Option(envvar="REDIS_URL", hidden=True)] = None,
) -> None:
    """A local cluster running the demo cuelist; Ctrl-C stops everything it started.

    Its state (the embedded server's append-only file) and logs are kept in --data, so
    runs and cuelists survive a restart; delete the folder to start afresh."""
    folder = cuelists or (Path("cuelists") if Path("cuelists").is_dir() else PACKAGE_CUELISTS)
    files = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    if not files:
        console.print(f"[red]error:[/] no cuelists in {folder}")
        raise typer.Exit(2)
    if port == 0:
        port = free_port()
        console.print(f"--port 0: the hub takes free port {port}")
    elif port_taken(port):
        console.print(
            f"[red]error:[/] port {port} is taken (another callboard up or hub, or another "
            "program); nothing was started. Use --port N, or --port 0 for a free one"
        )
        raise typer.Exit(2)
    try:
        store = DataDir(data.resolve()).lock()
    except UpError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    try:
        raise typer.Exit(_run(port, store, files, demo, exit_after_demo, redis_url))
    finally:
        store.unlock()


def _run(
    port: int, store: DataDir, files: list[Path], demo: str, exit_after_demo: bool,
    redis_url: str | None,
) -> int:  # fmt: skip
    demo_file = next((f for f in files if f.name == demo), files[0])
    agents = agents_of(files)
    contracts = contracts_of(files)
    url = f"http://127.0.0.1:{port}"
    hub_id = f"up-{uuid.uuid4().hex[:12]}"
    prefix = os.environ.get("CALLBOARD_PREFIX") or DEFAULT_PREFIX
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CALLBOARD_API_URL": url}
    cluster = Cluster(store.logs, env)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if not redis_url:
            console.print(f"starting the embedded server (state in {store.redis}) ...")
            cluster.server = EmbeddedServer(appendonly=True, data_dir=str(store.redis)).start()
            redis_url = cluster.server.url
            console.print(f"  {cluster.server.binary} at {redis_url}")
        env["REDIS_URL"] = redis_url
        console.print(f"starting the hub on port {port} (logs in {store.logs}) ...")
        hub = cluster.spawn(
            "hub", [sys.executable, "-m", "hub.main", "--port", str(port)], CALLBOARD_HUB_ID=hub_id
        )
        with Client(url, os.environ.get("CALLBOARD_API_KEY")) as client:
            try:
                wait_for_own_hub(client, hub_id, lambda: hub.poll() is None, READY_TIMEOUT_S)
            except UpError as exc:
                tail = cluster.log_tail("hub")
                raise UpError(f"{exc}\n{tail}" if tail else str(exc)) from None
            before = client.runs_page(1000)["count"]
            if before:
                runs = f"{before} run{'s' if before != 1 else ''}"
                console.print(f"  state kept from before: {runs} (in {store.root})")
            console.print(
                f"starting {len(agents)} specialists: {', '.join(agents)} ...", soft_wrap=True
            )
            debuggers = debuggers_of(files)
            for agent in agents:
                if agent in debuggers:
                    argv = [sys.executable, "-m", "callboard.specialist_cmd", "debugger",
                            "--agent", agent]  # fmt: skip
                else:
                    argv = echo_argv(agent, contracts)
                cluster.spawn(log_name(agent), argv)
            _wait_registered(client, cluster, agents)
            names = {}
            for path in files:
                stored = client.submit(path.read_text())
                names[path] = stored["name"]
                console.print(f"submitted {stored['name']} {stored['version'][:12]}")
            run_id = client.start_run(names[demo_file])
            # before the table, so the desk can be opened while the demo runs
            console.print(f"the demo, live on the desk: {url}/runs/{run_id}", soft_wrap=True)
            final = watch(client, run_id, console)
            status = str(final["status"])
        console.print(f"the demo ({names[demo_file]}) finished: [bold]{status}[/]")
        console.print(
            f"desk: {url}/   API: {url}/v1   docs: {url}/docs   metrics: {url}/metrics",
            soft_wrap=True,
        )
        console.print("to join from another shell:")
        for line in join_lines(redacted(redis_url), url, prefix):
            console.print(f"  {line}", soft_wrap=True)
        if exit_after_demo:
            return 0 if status == "success" else 1
        console.print("running; Ctrl-C stops everything")
        while not cluster.dead():
            time.sleep(0.5)
        dead = ", ".join(cluster.dead())
        console.print(f"[red]stopped:[/] {dead} exited; see {store.logs}")
        return 1
    except KeyboardInterrupt:
        console.print("stopping")
        return 0
    except (ApiError, BadAnswer, OutcomeUnknown, Unreachable, UpError) as exc:
        console.print("[red]error:[/]", escape(str(exc)))  # its text is no markup of ours
        return 2
    finally:
        cluster.stop()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    typer.run(up)
