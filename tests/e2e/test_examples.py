"""Every example cuelist in cuelists/ runs as shipped (on one server, then on a Redis Cluster):
submit, run, follow its events, complete.

Echo specialists serve every agent the examples name (the built-in debugger, each one named
as a debugger); armed cues get an operator GO and
conditions no cue raises are raised through the API, as an operator would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from callboard.up import agents_of, contracts_of, debuggers_of, echo_argv
from tests.e2e.procs import ROOT, child_env, processes, sse_events, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
EXAMPLES = sorted((ROOT / "cuelists").glob("*.yaml"))
DONE = ("success", "partial", "failed", "cancelled")


@pytest.fixture(scope="module", params=["single", "cluster"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    """A hub and echo specialists on one server, then on a 3-master Redis Cluster."""
    name = "redis_cluster" if request.param == "cluster" else "redis_server"
    server: EmbeddedServer | EmbeddedCluster = request.getfixturevalue(name)
    agents, contracts = agents_of(EXAMPLES), contracts_of(EXAMPLES)
    debuggers = debuggers_of(EXAMPLES)
    folder = tmp_path_factory.mktemp("examples")
    with processes(child_env(server), folder) as procs:
        url = procs.hub()
        for agent in agents:  # with its inline contract, as `callboard up` starts it
            if agent in debuggers:
                procs.specialist("debugger", agent)
            else:
                procs.spawn(f"echo-{agent}", echo_argv(agent, contracts))
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_online(client, agents)
            yield client


def operator_flags(doc: dict[str, Any]) -> set[str]:
    """Conditions some cue waits for that no cue raises: an operator raises those."""
    cues = doc.get("cues") or []
    wanted = {c for cue in cues for c in cue.get("conditions") or []}
    raised = {c for cue in cues for c in cue.get("raises") or []}
    return wanted - raised


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_to_completion(api: httpx.Client, path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    r = api.post(
        "/v1/cuelists", content=path.read_bytes(), headers={"Content-Type": "application/yaml"}
    )
    assert r.status_code == 201, r.text
    run_id = api.post("/v1/runs", json={"cuelist": doc["cuelist"]}).json()["run_id"]
    for flag in sorted(operator_flags(doc)):
        assert api.post(f"/v1/runs/{run_id}/conditions/{flag}").status_code in (200, 409)

    def finished() -> dict[str, Any] | None:
        run = api.get(f"/v1/runs/{run_id}").json()
        for cue_id, cue in run["cues"].items():
            if cue["state"] == "armed":
                api.post(f"/v1/runs/{run_id}/cues/{cue_id}/go")
        for esc in api.get("/v1/escalations", params={"run_id": run_id, "status": "open"}).json()[
            "data"
        ]:
            suggested = esc["payload"].get("suggested_winner_cue")
            if suggested:
                api.post(f"/v1/escalations/{esc['id']}/resolve", json={"winner": suggested})
        return run if run["status"] in DONE else None

    run = eventually_sync(finished, 60, interval_s=0.1, message=f"{path.name} finished")
    events = sse_events(api, run_id)
    assert events[-1]["event"] == "run" and events[-1]["status"] == run["status"]
    assert sum(run["record"]["counts"].values()) == len(doc["cues"])
    # the usage the echo agents reported (`action.usage`) is what the run totalled
    spent = [(cue.get("action") or {}).get("usage") or {} for cue in doc["cues"]]
    assert run["usage"]["tokens"] == sum(u.get("tokens", 0) for u in spent)
    assert run["usage"]["cost"] == pytest.approx(sum(u.get("cost", 0) for u in spent))
    assert run["status"] in ("success", "partial"), run


def test_metrics_report_cue_phase_durations(api: httpx.Client) -> None:
    """After the examples ran (same hub), every phase has observed durations."""
    run_id = api.post("/v1/runs", json={"cuelist": "build-test-deploy"}).json()["run_id"]
    eventually_sync(lambda: api.get(f"/v1/runs/{run_id}").json()["status"] in DONE, 30)
    text = api.get("/metrics").text
    for phase in ("warning", "standby", "go"):
        line = f'callboard_cue_phase_seconds_count{{phase="{phase}"}}'
        counts = [float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)]
        assert counts and counts[0] > 0, f"no {phase} durations in /metrics"
    assert "callboard_messages_routed_total" in text
