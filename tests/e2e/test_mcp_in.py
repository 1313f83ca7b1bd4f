"""The official `mcp` SDK's client operates a real hub process through its MCP server at /mcp:
lists the tools, validates a cuelist, dry-runs and starts it, reads the run's reasons, gives
the approval and the manual GO it waits for, and sees it succeed; refusals are tool errors,
arguments are taken as JSON sent them; a big cuelist is checked off the event loop; the key
is required and POST is the only method."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes, wait_online
from tests.helpers import eventually

pytestmark = pytest.mark.redis
KEY = "mcp-in-key-0123456789"
RELEASE = """
cuelist: mcp-release
description: build, approve, release
cues:
  - id: BUILD
    target_agents: [worker]
    action: {context: {artifact: app.tar}}
  - id: TEST
    target_agents: [worker]
    depends_on: [BUILD]
    conditions: [approval_received]
  - id: SHIP
    target_agents: [worker]
    depends_on: [TEST]
    manual: true
"""
TOOLS = {
    "list_cuelists", "get_cuelist", "validate_cuelist", "start_run", "dry_run", "get_run",
    "list_runs", "go", "raise_condition", "cancel_run", "list_escalations", "resolve_escalation",
    "change_budget",
}  # fmt: skip
BUDGETED = """
cuelist: mcp-budget
cues:
  - id: DRAFT
    target_agents: [worker]
    action: {usage: {tokens: 500}}
  - id: PUBLISH
    target_agents: [worker]
    depends_on: [DRAFT]
"""


@pytest.fixture(scope="module")
def hub_url(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    env = child_env(redis_server, CALLBOARD_API_KEY=KEY)
    with processes(env, tmp_path_factory.mktemp("mcp-in")) as procs:
        url = procs.hub()
        procs.echo("worker")
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as api:
            wait_online(api, ["worker"])
            for text in (RELEASE, BUDGETED):
                r = api.post(
                    "/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"}
                )
                assert r.status_code == 201, r.text
        yield url


@asynccontextmanager
async def connected(hub_url: str) -> AsyncIterator[Client]:
    """The SDK's client on the hub's /mcp with the key (entered and left in one task, as
    anyio's cancel scopes want: not a fixture)."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
    async with http, Client(streamable_http_client(f"{hub_url}/mcp", http_client=http)) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_tools_run_a_cuelist_to_success(hub_url: str) -> None:
    async with connected(hub_url) as mcp:
        await _run_through(mcp)


async def _run_through(mcp: Client) -> None:
    listed = await mcp.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    by_name = {t.name: t for t in listed.tools}
    assert "cue_id" in by_name["go"].input_schema["properties"]
    assert by_name["get_run"].output_schema is not None  # the API's RunPublic

    names = [c["name"] for c in (await call(mcp, "list_cuelists"))["data"]]
    assert "mcp-release" in names
    checked = await call(mcp, "validate_cuelist", source=RELEASE)
    assert checked["valid"] is True and checked["name"] == "mcp-release"
    broken = yaml.safe_load(RELEASE)
    broken["cues"][0]["depends_on"] = ["SHIP"]
    bad = await call(mcp, "validate_cuelist", source=yaml.safe_dump(broken))
    assert bad["valid"] is False
    assert any("cycle" in e["message"] for e in bad["errors"])

    dry = await call(mcp, "dry_run", cuelist="mcp-release")
    assert dry["status"] == "dry" and dry["record"]["fired"][:1] == ["BUILD"]

    run_id = (await call(mcp, "start_run", cuelist="mcp-release", params={"by": "mcp"}))["run_id"]

    async def waiting_for_approval() -> dict[str, Any] | None:
        run = await call(mcp, "get_run", run_id=run_id)
        test = run["cues"]["TEST"]
        return (
            run
            if "approval_received" in (test["reason"] or "")
            and run["cues"]["BUILD"]["state"] == "completed"
            else None
        )

    run = await eventually(waiting_for_approval, 20, interval_s=0.1, message="TEST waits")
    assert run["cues"]["SHIP"]["state"] in ("pending", "waiting")
    raised = await call(mcp, "raise_condition", run_id=run_id, name="approval_received")
    assert raised["conditions"] == ["approval_received"]

    async def armed() -> bool:
        return (await call(mcp, "get_run", run_id=run_id))["cues"]["SHIP"]["state"] == "armed"

    await eventually(armed, 20, interval_s=0.1, message="SHIP armed")
    fired = await call(mcp, "go", run_id=run_id, cue_id="SHIP", idempotency_key="ship-1")
    assert fired["cue"] == "SHIP"
    # called again with its key (its answer lost, say): answered as it was, not refused
    assert await call(mcp, "go", run_id=run_id, cue_id="SHIP", idempotency_key="ship-1") == fired

    async def done() -> dict[str, Any] | None:
        run = await call(mcp, "get_run", run_id=run_id)
        return run if run["status"] != "running" else None

    final = await eventually(done, 20, interval_s=0.1, message="run finished")
    assert final["status"] == "success" and final["params"] == {"by": "mcp"}
    runs = await call(mcp, "list_runs", cuelist="mcp-release", status="success")
    assert run_id in [r["run_id"] for r in runs["data"]]
    escalations = await call(mcp, "list_escalations", run_id=run_id)
    assert escalations["count"] == 0


async def test_refusals_are_tool_errors_with_the_reason(hub_url: str) -> None:
    async with connected(hub_url) as mcp:
        await _refusals(mcp)


async def _refusals(mcp: Client) -> None:
    result = await mcp.call_tool("get_run", {"run_id": "no-such-run"})
    assert result.is_error and "no run no-such-run" in str(result.content)
    result = await mcp.call_tool("start_run", {"cuelist": "nope"})
    assert result.is_error and "no cuelist named nope" in str(result.content)
    run_id = (await call(mcp, "start_run", cuelist="mcp-release"))["run_id"]
    result = await mcp.call_tool("go", {"run_id": run_id, "cue_id": "SHIP"})
    assert result.is_error and "SHIP" in str(result.content)  # not armed: 409's detail
    cancelled = await call(mcp, "cancel_run", run_id=run_id, reason="changed my mind")
    assert cancelled["status"] == "cancelled"
    result = await mcp.call_tool("cancel_run", {"run_id": run_id, "idempotency_key": "c-1"})
    assert result.is_error and "cancelled" in str(result.content)  # a refusal keeps no key
    result = await mcp.call_tool("go", {"run_id": run_id, "cue_id": "BUILD",
                                        "idempotency_key": "c-1"})  # fmt: skip
    assert result.is_error and "cancelled" in str(result.content)  # free: another request


async def test_a_budget_set_at_the_start_holds_the_run_and_a_raise_lets_it_go(
    hub_url: str,
) -> None:
    async with connected(hub_url) as mcp:
        await _budget(mcp)


async def _budget(mcp: Client) -> None:
    started = await call(mcp, "start_run", cuelist="mcp-budget", budget={"tokens": 400})
    run_id = started["run_id"]

    async def holding() -> dict[str, Any] | None:
        run = await call(mcp, "get_run", run_id=run_id)
        return run if run["status"] == "holding" else None

    run = await eventually(holding, 20, message="the run holds on its spent budget")
    assert "budget tokens spent 500 / 400" in run["hold_reason"]
    assert run["cues"]["PUBLISH"]["state"] not in ("go", "completed")
    raised = await call(mcp, "change_budget", run_id=run_id, limits={"tokens": 5000})
    assert raised["budget"]["tokens"] == 5000 and raised["usage"]["tokens"] == 500

    async def succeeded() -> bool:
        return (await call(mcp, "get_run", run_id=run_id))["status"] == "success"

    await eventually(succeeded, 20, message="the run finishes after the raise")


async def test_the_mcp_endpoint_needs_the_key(hub_url: str) -> None:
    async with httpx.AsyncClient() as anonymous:
        r = await anonymous.post(f"{hub_url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "x"})
    assert r.status_code == 401 and r.json()["detail"].startswith("missing or wrong API key")


def _big_cuelist(cues: int) -> str:
    """A valid cuelist of `cues` chained cues: about 0.9 MB (under the 1 MB body limit as a
    tool call), half a second or more to check."""
    lines = [
        f"  - {{id: C{i}, target_agents: [worker]"
        + (f", depends_on: [C{i - 1}]" if i else "")
        + ", action: {context: {n: 1}}}"
        for i in range(cues)
    ]
    return "cuelist: mcp-big\ncues:\n" + "\n".join(lines) + "\n"


async def test_a_big_cuelist_is_checked_off_the_event_loop(hub_url: str) -> None:
    source = _big_cuelist(10_000)
    async with connected(hub_url) as mcp:
        started = time.monotonic()
        checked = await call(mcp, "validate_cuelist", source=source)
        took_ms = (time.monotonic() - started) * 1000
    assert checked["valid"] is True and checked["name"] == "mcp-big"
    async with httpx.AsyncClient() as client:
        health = (await client.get(f"{hub_url}/healthz")).json()
    # the hub's worst loop lag of the last 5 s: checked on the loop, it is about the call's
    # whole time; in a worker thread, the loop only waits for the GIL now and then
    assert health["loop_lag_ms"] < took_ms / 3, (health, took_ms)


REFUSED_ARGUMENTS = [
    ("list_runs", {"limit": True}, "limit"),  # a boolean is not a number
    ("list_runs", {"limit": "2"}, "limit"),  # nor is a string
    ("list_runs", {"limit": 2.5}, "limit"),  # nor a fraction
    ("validate_cuelist", {"source": RELEASE, "strict": "yes"}, "strict"),
    ("validate_cuelist", {"source": RELEASE, "strict": 1}, "strict"),
    ("start_run", {"cuelist": "mcp-release", "budget": '{"tokens": 400}'}, "budget"),
    ("start_run", {"cuelist": "mcp-release", "params": '{"by": "mcp"}'}, "params"),
    ("start_run", {"cuelist": "mcp-release", "idempotency_key": "k" * 201}, "idempotency_key"),
    ("start_run", {"cuelist": "mcp-release", "idempotency_key": ""}, "idempotency_key"),
]


async def test_arguments_are_taken_as_json_sent_them(hub_url: str) -> None:
    async with connected(hub_url) as mcp:
        for tool, arguments, name in REFUSED_ARGUMENTS:
            result = await mcp.call_tool(tool, arguments)
            text = str(result.content)
            assert result.is_error, (tool, arguments, text)
            assert f"Error executing tool {tool}" in text and name in text, text
        runs = await call(mcp, "list_runs", limit=2)
        assert runs["count"] <= 2
        runs = await call(mcp, "list_runs", limit=2.0)  # an integer to JSON Schema
        assert runs["count"] <= 2
        limit = next(t for t in (await mcp.list_tools()).tools if t.name == "list_runs")
        assert limit.input_schema["properties"]["limit"] == {
            "default": 20, "minimum": 1, "maximum": 1000, "title": "Limit", "type": "integer"
        }  # fmt: skip
        assert "valid" in await call(mcp, "validate_cuelist", source=RELEASE, strict=True)
        # the REST API's Idempotency-Key takes up to 200 characters: so does the tool
        key = "k" * 200
        first = await call(mcp, "start_run", cuelist="mcp-release", idempotency_key=key)
        again = await call(mcp, "start_run", cuelist="mcp-release", idempotency_key=key)
        assert again == first
        await call(mcp, "cancel_run", run_id=first["run_id"])


async def test_post_is_the_only_method(hub_url: str) -> None:
    """Stateless, nothing is ever sent outside a POST's answer: GET (the standalone stream)
    and DELETE (a session's end) are 405, as the spec allows."""
    headers = {"Authorization": f"Bearer {KEY}", "Accept": "text/event-stream"}
    async with httpx.AsyncClient(headers=headers) as client:
        for method in ("GET", "DELETE"):
            async with client.stream(method, f"{hub_url}/mcp") as r:
                assert r.status_code == 405, (method, r.status_code, r.headers)
                assert r.headers["allow"] == "POST"


async def test_a_refused_request_is_answered_in_json(hub_url: str) -> None:
    """The SDK refused a wrong Content-Type or Host (its DNS-rebinding check) in plain
    text, or with no Content-Type at all; like every other answer of the API, these are
    JSON now: `{"detail": ...}`, the status and the SDK's words kept (a wrong Accept was
    already a JSON-RPC error)."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    auth = {"Authorization": f"Bearer {KEY}"}
    accept = {"Accept": "application/json, text/event-stream"}
    wrong = {
        "Content-Type": {**auth, **accept, "Content-Type": "text/plain"},
        "Accept": {**auth, "Accept": "text/html", "Content-Type": "application/json"},
        "Host": {**auth, **accept, "Content-Type": "application/json", "Host": "evil.example"},
    }
    async with httpx.AsyncClient() as client:
        for what, headers in wrong.items():
            r = await client.post(f"{hub_url}/mcp", content=json.dumps(call), headers=headers)
            assert 400 <= r.status_code < 500, (what, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/json"), (what, r.headers)
            said = r.json()  # the API's {"detail"}, or a JSON-RPC error of the SDK's own
            assert said.get("detail") or said["error"]["message"], (what, r.text)
        r = await client.post(f"{hub_url}/mcp", json=call, headers={**auth, **accept})
        assert r.status_code == 200 and "tools" in r.json()["result"], r.text
