"""docker-compose.yml runs as plain local processes: every non-redis service's `command` and
`environment`, against a local server loaded with the ACL file the `acl` service writes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import yaml

from callboard.embedded import EmbeddedServer, free_port
from tests.e2e.procs import ROOT, processes, sse_events, wait_done, wait_online

pytestmark = pytest.mark.redis
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def interpolate(value: Any) -> str:
    """Compose's `${NAME:-default}` (from this environment, else the default) and `$$`."""
    text = str(value)
    text = _VAR.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), text)
    return text.replace("$$", "$")


def callboard_argv() -> list[str]:
    """The `callboard` console script of this environment."""
    script = Path(sys.executable).parent / "callboard"
    assert script.exists(), "install the package (pip install -e .) for the console script"
    return [str(script)]


def local(
    service: dict[str, Any], redis_port: int, hub_port: int
) -> tuple[list[str], dict[str, str]]:
    """A service as a local process: host names to 127.0.0.1, ports from the test."""
    argv = [interpolate(a) for a in service["command"]]
    if argv[0] == "callboard":
        argv = callboard_argv() + argv[1:]
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(hub_port))):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
    env = {k: interpolate(v) for k, v in (service.get("environment") or {}).items()}
    if "REDIS_URL" in env:
        url = urlsplit(env["REDIS_URL"])
        userinfo = url.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{redis_port}" if userinfo else f"127.0.0.1:{redis_port}"
        env["REDIS_URL"] = urlunsplit(url._replace(netloc=netloc))
    base = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    base.pop("REDIS_URL", None)
    return argv, {**base, **env, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_redis_service_is_durable_and_locked_down(compose: dict[str, Any]) -> None:
    command = " ".join(map(str, compose["services"]["redis"]["command"]))
    assert "--appendfsync ${REDIS_APPENDFSYNC:-everysec}" in command  # always, on request
    command = interpolate(command)
    for flag in ("--appendonly yes", "--maxmemory-policy noeviction",
                 "--aclfile"):  # fmt: skip
        assert flag in command
    for name, service in compose["services"].items():
        assert "healthcheck" in service or name not in ("redis", "hub"), name
        assert "container_name" not in service, f"{name} must stay scalable"


def test_every_example_agent_has_a_service(compose: dict[str, Any]) -> None:
    from callboard.up import agents_of

    files = sorted((ROOT / "cuelists").glob("*.yaml"))
    assert files
    agents = {a for s in compose["services"].values() for a in _agent(s)}
    assert set(agents_of(files)) <= agents


def _agent(service: dict[str, Any]) -> list[str]:
    argv = [str(a) for a in service.get("command") or []]
    return [argv[argv.index("--agent") + 1]] if "specialist" in argv and "--agent" in argv else []


@pytest.fixture(scope="module")
def stack(
    compose: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("compose")
    services = compose["services"]
    redis_port, hub_port = free_port(), free_port()
    # one-shot services first (the ACL file), in their working directory
    argv, env = local(services["acl"], redis_port, hub_port)
    done = subprocess.run(argv, env=env, cwd=folder, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    aclfile = folder / "users.acl"
    assert aclfile.exists()
    server = EmbeddedServer(port=redis_port, aclfile=str(aclfile), appendonly=True)
    with server, processes({}, folder) as procs:
        hub_env = local(services["hub"], server.port, hub_port)[1]
        for name, service in services.items():
            if name in ("redis", "acl"):
                continue
            argv, env = local(service, server.port, hub_port)
            proc = procs.spawn(name, argv, **env)
            assert proc.poll() is None
        url = f"http://127.0.0.1:{hub_port}"
        key = hub_env["CALLBOARD_API_KEY"]
        yield {"url": url, "key": key, "procs": procs, "services": services}


def test_a_cuelist_runs_end_to_end_through_the_rest_api(stack: dict[str, Any]) -> None:
    everyone = [a for s in stack["services"].values() for a in _agent(s)]
    # a cue for every echo service (the debugger service diagnoses, it runs no actions)
    agents = [a for s in stack["services"].values() if "echo" in (s.get("command") or [])
              for a in _agent(s)]  # fmt: skip
    headers = {"Authorization": f"Bearer {stack['key']}"}
    with httpx.Client(base_url=stack["url"], headers=headers, timeout=30) as api:
        from tests.helpers import eventually_sync

        def healthy() -> bool:
            try:
                return api.get("/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        eventually_sync(healthy, 30, interval_s=0.05, message="compose hub healthy")
        wait_online(api, everyone)
        cues = [
            {"id": f"CUE-{i}", "target_agents": [agent], "action": {"context": {f"k{i}": i}},
             **({"depends_on": [f"CUE-{i - 1}"]} if i else {})}
            for i, agent in enumerate(agents)
        ]  # fmt: skip
        r = api.post("/v1/cuelists", json={"cuelist": "compose-e2e", "cues": cues})
        assert r.status_code == 201, r.text
        r = api.post("/v1/runs", json={"cuelist": "compose-e2e"})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        events = sse_events(api, run_id)
        assert events[-1]["status"] == "success"
        run = wait_done(api, run_id)
        assert run["record"]["counts"] == {"completed": len(agents)}
        ctx = api.get(f"/v1/runs/{run_id}/context").json()["entries"]
        assert {e["source"] for e in ctx.values()} == set(agents)
