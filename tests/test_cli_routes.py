"""Every route of the hub's API has a CLI command, and each command calls its route.

The route table is callboard/commands/routes.py. The commands run against a stand-in hub
(tests/cli_fake_hub.py, an httpx.MockTransport), in both output modes: `-o json` must put
one parseable JSON document (NDJSON for `events`) on stdout and nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from callboard.cli import app
from callboard.commands import api
from callboard.commands.routes import ESC, NOT_ACTION_MODULES, NOT_ACTIONS, ROUTES, RUN
from hub.api import create_app
from hub.service import Hub, HubSettings
from protocols.messages import MessageType
from protocols.payloads import PAYLOAD_MODELS
from tests.cli_fake_hub import FakeHub, installed, run_body, sse

# Routes the CLI table may list before the hub serves them: none (a command is written
# with its route).
PENDING: set[tuple[str, str]] = set()
API_PATHS = ("/healthz", "/metrics")


def _walk(routes: Any, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(method, path, the endpoint's module) of every route, into included routers."""
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's included routers
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from _walk(inner.routes, prefix + (getattr(context, "prefix", "") or ""))
            continue
        module = getattr(getattr(route, "endpoint", None), "__module__", "") or ""
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":  # `{name:path}` is spelled `{name}`, as in OpenAPI
                yield method, re.sub(r"\{(\w+):\w+\}", r"{\1}", prefix + route.path), module


def served() -> dict[tuple[str, str], str]:
    """What a real hub app serves: its routes, walked, and its OpenAPI document."""
    hub_app = create_app(Hub(HubSettings(redis_url="redis://127.0.0.1:1/0")), run_hub=False)
    found = {(method, path): module for method, path, module in _walk(hub_app.routes)}
    for path, methods in hub_app.openapi()["paths"].items():
        for method in methods:
            found.setdefault((method.upper(), path), "")
    return found


def test_every_served_route_has_a_command_or_is_excluded_by_name() -> None:
    table = {(m, p) for m, p, _ in ROUTES}
    routes = served()
    assert len(routes) >= 20  # the walk found the routers, not only the docs pages
    for (method, path), module in sorted(routes.items()):
        if path.startswith("/v1/") or path in API_PATHS:
            assert (method, path) in table, f"{method} {path} has no CLI command in routes.py"
        else:
            excluded = path in NOT_ACTIONS or module.startswith(NOT_ACTION_MODULES)
            assert excluded, f"{method} {path} ({module}): an API action, or in NOT_ACTIONS?"
    # the table names nothing that is neither served nor about to be
    assert table - set(routes) <= PENDING, table - set(routes) - PENDING


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeHub:
    return installed(monkeypatch, tmp_path)


def invoke(argv: list[str]) -> Any:
    return CliRunner().invoke(app, argv)


def argv_of(example: list[str], tmp_path: Path) -> list[str]:
    cuelist = tmp_path / "demo.yaml"
    cuelist.write_text("cuelist: demo\ncues: [{id: CUE-1, target_agents: [a]}]\n")
    return [str(cuelist) if a == "FILE" else a for a in example]


@pytest.mark.parametrize(
    ("method", "path", "example"), ROUTES, ids=[" ".join(r[2]) for r in ROUTES]
)
def test_the_command_calls_its_route(
    fake: FakeHub, tmp_path: Path, method: str, path: str, example: list[str]
) -> None:
    argv = argv_of(example, tmp_path)
    result = invoke(argv)
    assert result.exit_code == 0, result.output
    assert (method, path) in fake.routes(), fake.routes()
    assert None not in {route for _, route in fake.routes()}  # no call outside the table
    assert result.stdout.strip()  # a person sees something

    fake.calls.clear()
    result = invoke([*argv, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert (method, path) in fake.routes()
    lines = result.stdout.splitlines()
    if example[0] == "events":
        parsed = [json.loads(line) for line in lines]
        assert [e["event"] for e in parsed] == ["cue", "run"] and parsed[0]["id"] == "1-0"
    else:
        json.loads(result.stdout)  # the whole of stdout is one JSON document


def test_group_options_typed_before_the_subcommand_count(fake: FakeHub) -> None:
    result = invoke(["cuelists", "-o", "json", "--url", "http://other.test", "show", "demo"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "demo"
    assert fake.calls[-1][2].url.host == "other.test"


def test_the_commands_send_what_the_routes_expect(fake: FakeHub) -> None:
    run = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
    assert invoke(["rerun", run, "--from-failure"]).exit_code == 0
    assert json.loads(fake.calls[-1][2].content) == {"from_failure": True}
    assert invoke(["cancel", run, "--reason", "wrong branch"]).exit_code == 0
    assert json.loads(fake.calls[-1][2].content) == {"reason": "wrong branch"}
    argv = ["budget", run, "--tokens", "9000", "--wall-s", "60", "--counter", "api_calls=5"]
    result = invoke(argv)
    assert result.exit_code == 0, result.output
    assert json.loads(fake.calls[-1][2].content) == {
        "tokens": 9000, "wall_s": 60.0, "counters": {"api_calls": 5},
    }  # fmt: skip
    assert "budget: tokens 10 / 1000" in result.stdout
    assert invoke(["budget", run, "--counter", "api_calls"]).exit_code == 2  # not NAME=N
    argv = ["run", "demo", "--budget", "tokens=500", "--budget", "counters.api_calls=3"]
    assert invoke(argv).exit_code == 0
    assert json.loads(fake.calls[-1][2].content)["budget"] == {
        "tokens": 500, "counters": {"api_calls": 3},
    }  # fmt: skip
    assert invoke(["cuelists", "delete", "demo", "--version", "abc"]).exit_code == 0
    assert fake.calls[-1][2].url.params["version"] == "abc"
    assert invoke(["runs", "--cuelist", "demo", "--status", "failed"]).exit_code == 0
    assert dict(fake.calls[-1][2].url.params) == {
        "limit": "20",
        "cuelist": "demo",
        "status": "failed",
    }
    assert invoke(["broadcast", "pause"]).exit_code == 0
    assert json.loads(fake.calls[-1][2].content)["message_type"] == "broadcast.pause"
    for kind in ("notice", "pause", "resume", "shutdown"):  # --message fits each payload
        assert invoke(["broadcast", kind, "--message", "hello"]).exit_code == 0
        sent = json.loads(fake.calls[-1][2].content)
        payload = PAYLOAD_MODELS[MessageType(sent["message_type"])].model_validate(sent["payload"])
        assert "hello" in payload.model_dump().values()
    assert invoke(["escalations", "resolve", "0190a3b4", "--winner", f"{run}/CUE-1"]).exit_code == 0
    assert json.loads(fake.calls[-1][2].content) == {"winner": f"{run}/CUE-1"}
    assert invoke(["escalations", "resolve", "0190a3b4", "--answer", "teal"]).exit_code == 0
    assert json.loads(fake.calls[-1][2].content) == {"answer": "teal"}
    assert invoke(["deadletters", "--before", "5-0", "--limit", "10"]).exit_code == 0
    assert dict(fake.calls[-1][2].url.params) == {"limit": "10", "before": "5-0"}


def test_refusals_and_bad_input_have_their_exit_codes(fake: FakeHub) -> None:
    run = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
    fake.answers[("POST", "/v1/runs/{run_id}/cues/{cue_id}/retry")] = (
        409, {"detail": "cue CUE-1 is not failed or blocked: it is completed"},
    )  # fmt: skip
    result = invoke(["retry", run, "CUE-1", "-o", "json"])
    assert result.exit_code == 1
    assert result.stdout == ""  # -o json: nothing but JSON on stdout, the reason on stderr
    assert "is not failed or blocked" in result.stderr
    fake.answers[("GET", "/v1/agents")] = (500, {"detail": "boom"})
    assert invoke(["agents"]).exit_code == 2
    assert invoke(["budget", run]).exit_code == 2  # no limit given: unusable input
    assert invoke(["broadcast", "notice", "--payload", "{nope"]).exit_code == 2
    fake.answers[("GET", "/healthz")] = (
        503, {"status": "unavailable", "hub_id": "h", "leader": False, "redis": False},
    )  # fmt: skip
    result = invoke(["health", "-o", "json"])
    assert result.exit_code == 1 and json.loads(result.stdout)["redis"] is False


def test_version_and_completion() -> None:
    result = invoke(["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("callboard ")
    assert "--install-completion" in invoke(["--help"]).stdout


def test_events_resume_from_the_last_id_while_the_run_goes_on(fake: FakeHub) -> None:
    streams = iter([
        sse(("cue", {"cue": "CUE-1", "state": "go"})),  # the hub ended this stream early
        "id: 2-0\nevent: run\ndata: {\"status\": \"success\"}\n\n",
    ])  # fmt: skip
    states = iter(["running", "success"])
    run = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body("running"))
    handle = fake.handle

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            fake.answers[("GET", "/v1/runs/{run_id}/events")] = (200, next(streams))
        elif request.url.path == f"/v1/runs/{run}":
            fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body(next(states)))
        return handle(request)

    api.TRANSPORT = httpx.MockTransport(answer)
    result = invoke(["events", run, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["1-0", "2-0"]
    asked = [r for _, route, r in fake.calls if route == "/v1/runs/{run_id}/events"]
    assert "last-event-id" not in asked[0].headers
    assert asked[1].headers["last-event-id"] == "1-0"


def test_watching_with_json_prints_the_final_run_and_exits_by_it(fake: FakeHub) -> None:
    result = invoke(["run", "demo", "--watch", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "success"
    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body("failed"))
    run = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
    result = invoke(["rerun", run, "--watch", "-o", "json"])
    assert result.exit_code == 1  # the new run did not succeed
    assert json.loads(result.stdout)["status"] == "failed"


def test_a_run_shows_what_its_cues_returned(fake: FakeHub) -> None:
    body = run_body()
    body["cues"]["CUE-1"] = {**body["cues"]["CUE-1"], "results": {"a": {"passed": 42}}}
    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, body)
    result = invoke(["status", "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"])
    assert result.exit_code == 0, result.output
    assert 'a: {"passed": 42}' in result.stdout
    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body())
    assert "result" not in invoke(["status", "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"]).stdout


def test_piped_tables_carry_whole_ids_and_uncut_rows(fake: FakeHub) -> None:
    out = invoke(["escalations"]).stdout  # eight columns, two of them ids: wider than 80
    assert ESC in out and RUN in out and "escalation.timeout" in out and "…" not in out
