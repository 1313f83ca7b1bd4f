"""Every cuelist the README shows runs to the final status the README implies, through a
real hub and echo specialists (the processes `callboard up` starts), with this test as the
operator: it gives what a holding run names in `hold_reason` (a GO, an approval) and
nothing else."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import ROOT, child_env, processes, sse_events, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = [
    text for text in BLOCK.findall((ROOT / "README.md").read_text())
    if isinstance(doc := yaml.safe_load(text), dict) and "cuelist" in doc
]  # fmt: skip
# What the README says of each: run as an operator would (GO when armed, approvals raised).
IMPLIED = {"deploy-pipeline": "success"}
DONE = ("success", "partial", "failed", "cancelled")


def _agents() -> list[str]:
    docs = [yaml.safe_load(text) for text in BLOCKS]
    return sorted({a for doc in docs for cue in doc["cues"] for a in cue["target_agents"]})


@pytest.fixture(scope="module")
def api(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    with processes(child_env(redis_server), tmp_path_factory.mktemp("readme")) as procs:
        url = procs.hub()
        for agent in _agents():
            procs.echo(agent)
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_online(client, _agents())
            yield client


def test_the_readme_shows_cuelists_and_says_what_each_does() -> None:
    names = [yaml.safe_load(text)["cuelist"] for text in BLOCKS]
    assert names and sorted(names) == sorted(IMPLIED)  # a new example needs its outcome here


def _operate(api: httpx.Client, run_id: str, run: dict[str, Any]) -> None:
    """Give a holding run what its hold_reason names, as an operator would."""
    for need in (run["hold_reason"] or "").split("; "):
        if need.startswith("GO for "):
            r = api.post(f"/v1/runs/{run_id}/cues/{need.removeprefix('GO for ')}/go")
        elif need.startswith("condition "):
            r = api.post(f"/v1/runs/{run_id}/conditions/{need.removeprefix('condition ')}")
        else:
            raise AssertionError(f"the run holds for what no operator should give: {need}")
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("text", BLOCKS, ids=lambda t: yaml.safe_load(t)["cuelist"])
def test_a_readme_cuelist_runs_as_the_readme_says(api: httpx.Client, text: str) -> None:
    name = yaml.safe_load(text)["cuelist"]
    r = api.post("/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    run_id = api.post("/v1/runs", json={"cuelist": name}).json()["run_id"]
    gave: list[str] = []

    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = api.get(f"/v1/runs/{run_id}").json()
        if run["status"] == "holding" and run["hold_reason"] not in gave:
            gave.append(run["hold_reason"])
            _operate(api, run_id, run)
        return run if run["status"] in DONE else None

    run = eventually_sync(finished, 60, interval_s=0.1, message=f"{name} finished")
    assert run["status"] == IMPLIED[name], run
    assert sse_events(api, run_id)[-1]["status"] == run["status"]
    if name == "deploy-pipeline":  # what its comments promise
        assert gave == ["condition approval_received", "GO for CUE-300"]
        assert run["cues"]["CUE-100"]["state"] == "completed"  # its handoff came, in full
        assert run["conditions"] == ["build_done", "approval_received"]
