"""The `mcp` specialist runs tools of a real MCP server (the official SDK's, examples/
mcp_server.py) started by the test, over streamable HTTP (with a token) and over stdio: the
tool's result becomes the cue's result and context; an unknown tool is not ready; a tool
error fails the cue. Hub and specialists are processes."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from callboard.embedded import EmbeddedServer, free_port
from tests.e2e.procs import ROOT, Procs, child_env, processes, wait_done, wait_online
from tests.helpers import eventually, eventually_sync

pytestmark = pytest.mark.redis
TOKEN = "mcp-token-0123456789"
SERVER = str(ROOT / "examples" / "mcp_server.py")
STDIO = [sys.executable, SERVER, "--stdio"]


@pytest.fixture(scope="module")
def world(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    env = child_env(redis_server)
    with processes(env, tmp_path_factory.mktemp("mcp-out")) as procs:
        hub = procs.hub()
        port = free_port()
        argv = [sys.executable, SERVER, "--port", str(port),
                "--token", TOKEN]  # fmt: skip
        procs.spawn("mcp-server", argv)
        tools_url = f"http://127.0.0.1:{port}/mcp"

        def up() -> bool:
            try:
                return httpx.get(tools_url, timeout=1).status_code == 401  # up, and guarded
            except httpx.HTTPError:
                return False

        eventually_sync(up, 30, interval_s=0.05, message="MCP server up")
        specialist = [sys.executable, "-m", "callboard.specialist_cmd", "mcp"]
        procs.spawn("mcp-tools", [*specialist, "--agent", "tools", "--url", tools_url],
                    CALLBOARD_MCP_TOKEN=TOKEN)  # fmt: skip
        procs.spawn("mcp-any", [*specialist, "--agent", "any-tools"])  # stdio via action.server
        with httpx.Client(base_url=hub, timeout=30) as api:
            wait_online(api, ["tools", "any-tools"])
            yield World(api, tools_url, procs)


@dataclass
class World:
    api: httpx.Client
    tools_url: str
    procs: Procs


def _run(api: httpx.Client, doc: dict[str, Any]) -> dict[str, Any]:
    assert api.post("/v1/cuelists", json=doc).status_code == 201
    run_id = api.post("/v1/runs", json={"cuelist": doc["cuelist"]}).json()["run_id"]
    return wait_done(api, run_id)


def test_tool_results_become_cue_results_and_context(
    world: World,
) -> None:
    api = world.api
    doc = {
        "cuelist": "mcp-tool-results",
        "cues": [
            {"id": "ADD", "target_agents": ["tools"], "auto_follow": "SHOUT",
             "action": {"tool": "add", "arguments": {"a": 2, "b": 40}}},
            {"id": "SHOUT", "target_agents": ["any-tools"],
             "action": {"server": STDIO, "tool": "shout", "arguments": {"text": "ship it"}}},
        ],
    }  # fmt: skip
    run = _run(api, doc)
    assert run["status"] == "success", run
    entries = api.get(f"/v1/runs/{run['run_id']}/context").json()["entries"]
    assert entries["ADD.result"]["value"] == {"result": 42}
    assert entries["ADD.result"]["source"] == "tools"
    assert entries["SHOUT.result"]["value"] == {"result": "SHIP IT!"}
    assert entries["SHOUT.result"]["tags"] == ["mcp"]


def test_unknown_tool_not_ready_and_tool_error_fails(world: World) -> None:
    api = world.api
    doc = {
        "cuelist": "mcp-refusals",
        "start": ["NOPE", "BROKEN"],
        "defaults": {"standby_timeout_s": 3},
        "cues": [
            {"id": "NOPE", "target_agents": ["tools"], "action": {"tool": "juggle"}},
            {"id": "BROKEN", "target_agents": ["tools"], "action": {"tool": "broken"}},
        ],
    }
    assert api.post("/v1/cuelists", json=doc).status_code == 201
    run_id = api.post("/v1/runs", json={"cuelist": "mcp-refusals"}).json()["run_id"]

    def not_ready() -> str | None:
        reason = api.get(f"/v1/runs/{run_id}").json()["cues"]["NOPE"]["reason"] or ""
        return reason if "not ready" in reason else None

    reason = eventually_sync(not_ready, 20, interval_s=0.05, message="NOPE not ready")
    assert "has no tool 'juggle'" in reason and "add" in reason
    run = wait_done(api, run_id)
    assert run["status"] == "failed"
    assert "the printer is on fire" in run["cues"]["BROKEN"]["error"]


async def _calls(url: str) -> dict[str, int]:
    """How often the server answered each tool (its `calls` tool, with the token)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        result = await client.call_tool("calls", {})
    assert result.structured_content is not None
    return dict(result.structured_content)


async def test_a_tool_call_is_not_made_twice_when_its_replica_dies(world: World) -> None:
    """kill -9 the replica mid-call; the one that reclaims the GO does not call again."""
    api, procs = world.api, world.procs
    argv = [sys.executable, "-m", "callboard.specialist_cmd", "mcp", "--agent", "once",
            "--url", world.tools_url]  # fmt: skip
    fast = {"CALLBOARD_MCP_TOKEN": TOKEN, "CALLBOARD_MIN_IDLE_MS": "1500"}
    first = procs.spawn("mcp-once-1", argv, **fast)
    wait_online(api, ["once"])
    slow = {"tool": "slow", "arguments": {"seconds": 30}}
    doc = {
        "cuelist": "mcp-once",
        "cues": [{"id": "SLOW", "target_agents": ["once"], "action": slow}],
    }
    assert api.post("/v1/cuelists", json=doc).status_code == 201
    before = (await _calls(world.tools_url)).get("slow", 0)
    run_id = api.post("/v1/runs", json={"cuelist": "mcp-once"}).json()["run_id"]

    async def called() -> bool:
        return (await _calls(world.tools_url)).get("slow", 0) > before

    await eventually(called, 20, interval_s=0.1, message="the slow tool was called")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    procs.spawn("mcp-once-2", argv, **fast)
    run = wait_done(api, run_id, timeout_s=30)
    assert run["status"] == "failed"
    assert "not called twice" in run["cues"]["SLOW"]["error"]
    assert (await _calls(world.tools_url))["slow"] == before + 1


def test_the_shipped_example_runs_as_shipped(world: World) -> None:
    """cuelists/interop/mcp-tools.yaml as shipped: the stdio server it names is started by
    the specialist from the repository's root."""
    world.procs.spawn(
        "mcp-example", [sys.executable, "-m", "callboard.specialist_cmd", "mcp", "--agent",
                        "mcp-tools"],
    )  # fmt: skip
    wait_online(world.api, ["mcp-tools"])
    path = ROOT / "cuelists" / "interop" / "mcp-tools.yaml"
    r = world.api.post(
        "/v1/cuelists", content=path.read_bytes(), headers={"Content-Type": "application/yaml"}
    )
    assert r.status_code == 201, r.text
    run_id = world.api.post("/v1/runs", json={"cuelist": "mcp-tools"}).json()["run_id"]
    run = wait_done(world.api, run_id)
    assert run["status"] == "success", run
    entries = world.api.get(f"/v1/runs/{run_id}/context").json()["entries"]
    assert entries["ADD.result"]["value"] == {"result": 42}
    assert entries["SHOUT.result"]["value"] == {"result": "SHIP IT!"}
