"""Run budgets end to end: a real hub and echo specialists, each its own process, report
usage; a run stops at its token budget, holds saying why, and goes on when the budget is
raised through the API or the CLI. Also the API's refusals (404, 409, 422)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from callboard.cli import app
from callboard.embedded import EmbeddedServer
from tests.e2e.procs import Procs, child_env, processes, wait_done, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
AGENTS = ["bud-alpha", "bud-beta"]
TOKENS = """
cuelist: e2e-budget
budget: {tokens: 1000, cost: 2.0}
cues:
  - id: PLAN
    target_agents: [bud-alpha]
    action: {usage: {tokens: 600, cost: 0.25}}
    auto_follow: WRITE
  - id: WRITE
    target_agents: [bud-beta]
    action: {usage: {tokens: 450, cost: 0.5, counters: {api_calls: 2}}}
    auto_follow: SHIP
  - id: SHIP
    target_agents: [bud-alpha]
    action: {usage: {tokens: 30, cost: 0.125, counters: {api_calls: 1}}}
"""
PLAIN = """
cuelist: e2e-budget-plain
cues:
  - {id: ONLY, target_agents: [bud-alpha]}
"""


@pytest.fixture(scope="module")
def stack(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    with processes(child_env(redis_server), tmp_path_factory.mktemp("budgets")) as procs:
        url = procs.hub()
        for agent in AGENTS:
            procs.echo(agent)
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_online(client, AGENTS)
            for text in (TOKENS, PLAIN):
                r = client.post(
                    "/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"}
                )
                assert r.status_code == 201, r.text
        yield {"procs": procs, "url": url}


@pytest.fixture
def api(stack: dict[str, Any]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack["url"], timeout=30) as client:
        yield client


def _start(api: httpx.Client, name: str, **body: Any) -> str:
    r = api.post("/v1/runs", json={"cuelist": name, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def _holding(api: httpx.Client, run_id: str) -> dict[str, Any]:
    def held() -> dict[str, Any] | None:
        run: dict[str, Any] = api.get(f"/v1/runs/{run_id}").json()
        return run if run["status"] == "holding" else None

    return eventually_sync(held, 30, interval_s=0.05, message=f"run {run_id} holding")


def _metric(api: httpx.Client, line_start: str) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_run_stops_at_its_token_budget_and_goes_on_when_it_is_raised(api: httpx.Client) -> None:
    tokens_before = _metric(api, 'callboard_usage_tokens_total{agent="bud-alpha"}')
    run_id = _start(api, "e2e-budget")
    run = _holding(api, run_id)
    assert run["hold_reason"] == "budget tokens spent 1,050 / 1,000"
    assert run["cues"]["SHIP"]["state"] == "standby"  # called, its GO held back
    assert run["cues"]["SHIP"]["go_at"] is None
    assert run["cues"]["SHIP"]["reason"] == "GO paused: budget tokens spent 1,050 / 1,000"
    assert run["budget"] == {"tokens": 1000, "cost": 2.0, "counters": {}, "warn_at": 0.8}
    usage = run["usage"]
    assert (usage["tokens"], usage["cost"], usage["counters"]) == (1050, 0.75, {"api_calls": 2})
    assert run["cues"]["PLAN"]["usage"] == {"tokens": 600, "cost": 0.25, "counters": {}}
    assert run["cues"]["WRITE"]["usage"] == {
        "tokens": 450, "cost": 0.5, "counters": {"api_calls": 2},
    }  # fmt: skip
    escalations = api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
    budget = [e for e in escalations if e["cause"].startswith("budget:")]
    assert [(e["cause"], e["severity"]) for e in budget] == [("budget:tokens@1000", "medium")]

    r = api.post(f"/v1/runs/{run_id}/budget", json={"tokens": 2000})
    assert r.status_code == 200, r.text
    assert r.json()["budget"]["tokens"] == 2000 and r.json()["budget"]["cost"] == 2.0
    assert (r.json()["status"], r.json()["hold_reason"]) == ("running", None)  # SHIP's GO went
    done = wait_done(api, run_id)
    assert done["status"] == "success" and done["hold_reason"] is None
    usage = done["usage"]
    assert isinstance(usage, dict)
    assert (usage["tokens"], usage["cost"]) == (1080, 0.875)  # 600+450+30, .25+.5+.125
    assert usage["counters"] == {"api_calls": 3}
    assert usage["messages"] > 0 and usage["wall_s"] > 0
    spent = _metric(api, 'callboard_usage_tokens_total{agent="bud-alpha"}') - tokens_before
    assert spent == 630  # PLAN and SHIP; WRITE was bud-beta's
    assert _metric(api, 'callboard_usage_cost_total{agent="bud-beta"}') >= 0.5


def test_a_run_budget_merges_over_the_cuelists_and_the_cli_raises_it(
    api: httpx.Client, tmp_path: Path
) -> None:
    env = {
        "CALLBOARD_URL": str(api.base_url).rstrip("/"), "CALLBOARD_PROFILE": "",
        "CALLBOARD_CONFIG": str(tmp_path / "no-profiles.toml"), "CALLBOARD_API_KEY": "",
    }  # fmt: skip
    runner = CliRunner(env=env)
    argv = ["run", "e2e-budget", "--budget", "tokens=500", "--budget", "counters.api_calls=9"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    run_id = result.stdout.strip()
    run = _holding(api, run_id)  # PLAN's 600 spend 500: WRITE's GO is held
    assert run["budget"]["tokens"] == 500 and run["budget"]["cost"] == 2.0
    assert run["budget"]["counters"] == {"api_calls": 9}
    assert run["hold_reason"] == "budget tokens spent 600 / 500"
    assert run["cues"]["WRITE"]["state"] == "standby"
    result = runner.invoke(app, ["status", run_id])
    assert result.exit_code == 0, result.output
    assert "budget: tokens 600 / 500" in result.stdout
    result = runner.invoke(app, ["budget", run_id[:12], "--tokens", "5000", "-o", "json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["run_id"] == run_id and answer["budget"]["tokens"] == 5000
    assert wait_done(api, run_id)["status"] == "success"
    result = runner.invoke(app, ["budget", run_id, "--tokens", "1"])
    assert result.exit_code == 1 and "already success" in result.output  # 409: it ended


def test_budget_refusals(api: httpx.Client) -> None:
    unknown = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
    assert api.post(f"/v1/runs/{unknown}/budget", json={"tokens": 1}).status_code == 404
    run_id = _start(api, "e2e-budget-plain")
    assert wait_done(api, run_id)["status"] == "success"
    r = api.post(f"/v1/runs/{run_id}/budget", json={"tokens": 1})
    assert r.status_code == 409 and "already success" in r.json()["detail"]
    live = _start(api, "e2e-budget", budget={"tokens": 1})
    _holding(api, live)
    budget = api.get(f"/v1/runs/{live}").json()["budget"]
    for body in ({}, {"tokens": -1}, {"tokens": "many"}, {"colour": 1},
                 {"counters": {"bad name": 1}}, {"warn_at": 2},
                 # JSON's other types are not numbers (pydantic's lax mode took them)
                 {"tokens": "5000"}, {"tokens": True}, {"cost": False}, {"tokens": 1.5},
                 {"wall_s": "60"}, {"warn_at": True}, {"counters": {"calls": "9"}}):  # fmt: skip
        r = api.post(f"/v1/runs/{live}/budget", json=body)
        assert r.status_code == 422, (body, r.text)
    assert api.get(f"/v1/runs/{live}").json()["budget"] == budget  # none changed it
    r = api.post(f"/v1/runs/{live}/budget", json={"counters": {"calls": 9.0}})
    assert r.status_code == 200, r.text  # 9.0 is an integer to JSON Schema
    assert r.json()["budget"]["counters"] == {"calls": 9}
    r = api.post(f"/v1/runs/{live}/budget", json={"counters": {"bad name": 1}})
    assert "budget.counters.bad name" in r.json()["detail"] or "bad name" in r.json()["detail"]
    r = api.post("/v1/runs", json={"cuelist": "e2e-budget", "budget": {"wall_s": 0}})
    assert r.status_code == 422, r.text
    # a start's 422 is documented with `errors` (its key each): a budget's refusal too
    for budget in ({}, {"wall_s": 0}, {"counters": {"bad name": 1}}):
        r = api.post("/v1/runs", json={"cuelist": "e2e-budget", "budget": budget})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["key"].startswith("budget"), r.text
    assert api.post(f"/v1/runs/{live}/cancel").status_code == 200


def test_a_new_hub_keeps_the_totals_and_the_hold(stack: dict[str, Any]) -> None:
    procs: Procs = stack["procs"]
    with httpx.Client(base_url=stack["url"], timeout=30) as api:
        run_id = _start(api, "e2e-budget")
        before = _holding(api, run_id)
    hub = next(p for p in procs.procs if "hub.main" in str(p.args))
    hub.send_signal(signal.SIGTERM)  # a restart: the next hub leads from what Redis holds
    hub.wait(15)
    stack["url"] = procs.hub()
    with httpx.Client(base_url=stack["url"], timeout=30) as api:
        after = _holding(api, run_id)
        assert after["usage"]["tokens"] == before["usage"]["tokens"] == 1050
        assert after["usage"]["cost"] == before["usage"]["cost"] == 0.75
        assert after["hold_reason"] == "budget tokens spent 1,050 / 1,000"
        assert after["cues"]["WRITE"]["usage"] == before["cues"]["WRITE"]["usage"]
        escalations = api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
        assert [e["cause"] for e in escalations if e["cause"].startswith("budget:")] == [
            "budget:tokens@1000"
        ]  # warned once, not again by the new leader
        assert api.post(f"/v1/runs/{run_id}/budget", json={"tokens": 1080}).status_code == 200
        done = wait_done(api, run_id)
        assert done["status"] == "success" and done["usage"]["tokens"] == 1080  # type: ignore[index]
