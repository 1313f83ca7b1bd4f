"""A debugger after repeated failure, with real processes: a hub, two echo builders (one
broken), a tester, and the built-in `debugger` specialist. The broken builder fails twice;
the debugger is asked exactly once, its diagnosis lands in the context attributed to it,
and its `reassign` sends the third attempt to the other builder, which completes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from protocols.debugging import diagnosis_key
from tests.e2e.procs import ROOT, child_env, processes, sse_events, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
EXAMPLE = ROOT / "cuelists" / "debugger.yaml"
AGENTS = ["specialist-build", "specialist-code", "specialist-test", "specialist-debug"]


def test_the_debugger_is_asked_once_and_its_reassign_completes_the_cue(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    with processes(child_env(redis_server), tmp_path) as procs:
        url = procs.hub()
        for agent in AGENTS[:3]:
            procs.echo(agent)
        procs.specialist("debugger", "specialist-debug")
        with httpx.Client(base_url=url, timeout=30) as api:
            wait_online(api, AGENTS)
            r = api.post("/v1/cuelists", content=EXAMPLE.read_bytes(),
                         headers={"Content-Type": "application/yaml"})  # fmt: skip
            assert r.status_code == 201, r.text
            run_id = api.post("/v1/runs", json={"cuelist": "debugger"}).json()["run_id"]

            def finished() -> dict[str, Any] | None:
                run = api.get(f"/v1/runs/{run_id}").json()
                return run if run["status"] not in ("running", "pending", "holding") else None

            run = eventually_sync(finished, 60, interval_s=0.1, message="debugger run done")
            events = sse_events(api, run_id)
            context = api.get(f"/v1/runs/{run_id}/context").json()
    assert run["status"] == "success", json.dumps(run["cues"]["BUILD-100"])
    build = run["cues"]["BUILD-100"]
    assert build["state"] == "completed" and build["attempt"] == 3
    assert build["assigned"] == ["specialist-code"]
    assert set(build["result"]) == {"specialist-code"}  # the third attempt went there
    (decision,) = build["decisions"]
    assert decision["decision"] == "reassign" and decision["to"] == "specialist-code"
    assert decision["debugger"] == "specialist-debug"
    asked = [e for e in events if e["type"] == "debug"]
    assert len(asked) == 1 and asked[0]["attempts"] == 2  # once, after two failures in a row
    failed = [e for e in events if e["type"] == "attempt_failed"]
    assert [e["attempt"] for e in failed] == [1, 2]
    entry = context["entries"][diagnosis_key("BUILD-100")]
    assert entry["source"] == "specialist-debug" and "diagnosis" in entry["tags"]
    assert entry["value"]["decision"] == "reassign"
    assert "the same failure on every attempt" in entry["value"]["diagnosis"]
    assert run["cues"]["TEST-200"]["state"] == "completed"
