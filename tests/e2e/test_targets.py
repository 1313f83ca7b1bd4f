"""Targets by capability with real processes: a hub and echo specialists that register
what they provide and their labels; cues name a `target:` instead of agents."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from protocols.codec import decode
from protocols.keys import STREAM_FIELD, Keys
from tests.e2e.procs import Procs, child_env, processes, wait_done, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis

CUELIST = {
    "cuelist": "capabilities",
    "cues": [
        {
            "id": "REVIEW",
            "target": {"provides": ["code_review"], "count": 1},
            "auto_follow": "TRAIN",
        },
        {"id": "TRAIN", "target": {"filter": "labels.gpu AND NOT labels.busy"}},
    ],
}


def _echo(procs: Procs, agent: str, tmp_path: Path, provides: list[str], labels: str) -> None:
    contract = tmp_path / f"{agent}.yaml"
    contract.write_text(f"provides: [{', '.join(provides)}]\n")
    argv = [sys.executable, "-m", "callboard.specialist_cmd", "echo", "--agent", agent,
            "--contract", str(contract)]  # fmt: skip
    procs.spawn(f"echo-{agent}", argv, CALLBOARD_LABELS=labels)


def _received(server: EmbeddedServer, keys: Keys, agent: str) -> list[tuple[str, str]]:
    """(cue id, message type) of everything the hub put in the agent's inbox."""
    client = redis.Redis.from_url(server.url)
    try:
        entries = client.xrange(keys.inbox(agent))
    finally:
        client.close()
    out = []
    for _, fields in entries:
        msg = decode(fields[STREAM_FIELD.encode()])
        out.append((msg.cue_id or "", msg.message_type.value))
    return out


def test_provides_and_filter_pick_the_right_agents_and_no_one_else(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    keys = Keys(prefix)
    with processes(child_env(redis_server, prefix), tmp_path) as procs:
        url = procs.hub()
        _echo(procs, "rev-a", tmp_path, ["code_review"], "gpu=true,busy=true")
        _echo(procs, "rev-b", tmp_path, ["code_review"], "gpu=true")
        _echo(procs, "plain", tmp_path, ["build"], "gpu=false")
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, ["rev-a", "rev-b", "plain"])
            agents = {a["agent"]: a for a in api.get("/v1/agents").json()["data"]}
            assert agents["rev-a"]["contract"]["labels"] == {"gpu": True, "busy": True}
            submitted = api.post("/v1/cuelists", json=CUELIST)
            assert submitted.status_code == 201, submitted.text
            assert submitted.json()["warnings"] == []  # registered agents match both
            run_id = api.post("/v1/runs", json={"cuelist": "capabilities"}).json()["run_id"]
            run: dict[str, Any] = wait_done(api, run_id)
    assert run["status"] == "success", run
    review, train = run["cues"]["REVIEW"], run["cues"]["TRAIN"]
    assert review["target"] == {"provides": ["code_review"], "count": 1}
    (reviewer,) = review["targets"]  # exactly one of the two providers
    assert reviewer in ("rev-a", "rev-b")
    assert review["targets"] == {reviewer: "completed"} and review["resolved"] == [reviewer]
    assert train["targets"] == {"rev-b": "completed"}  # gpu and not busy
    other = "rev-b" if reviewer == "rev-a" else "rev-a"
    got = {a: _received(redis_server, keys, a) for a in ("rev-a", "rev-b", "plain")}
    assert ("REVIEW", "coord.go") in got[reviewer]
    assert not [m for m in got[other] if m[0] == "REVIEW"], got[other]
    assert ("TRAIN", "coord.go") in got["rev-b"]
    assert not [m for m in got["rev-a"] if m[0] == "TRAIN"]
    assert got["plain"] == []  # provides no code_review, has no gpu: never called


def test_no_match_waits_saying_so_and_fires_once_a_matching_agent_comes_online(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    cuelist = {"cuelist": "late-reviewer", "cues": [CUELIST["cues"][0] | {"auto_follow": None}]}
    with processes(child_env(redis_server), tmp_path) as procs:
        url = procs.hub()
        with httpx.Client(base_url=url, timeout=10) as api:
            submitted = api.post("/v1/cuelists", json=cuelist).json()
            assert [w["code"] for w in submitted["warnings"]] == ["no_agent_matches"]
            assert submitted["warnings"][0]["cue"] == "REVIEW"
            run_id = api.post("/v1/runs", json={"cuelist": "late-reviewer"}).json()["run_id"]

            def waiting() -> dict[str, Any] | None:
                cue = api.get(f"/v1/runs/{run_id}").json()["cues"]["REVIEW"]
                return cue if cue["state"] == "waiting" else None

            cue = eventually_sync(waiting, 30, interval_s=0.05, message="REVIEW waits")
            assert cue["reason"] == (
                "no online agent matches target {provides: [code_review], count: 1} (none online)"
            )
            assert api.get(f"/v1/runs/{run_id}").json()["status"] == "running"
            _echo(procs, "rev-late", tmp_path, ["code_review"], "")
            wait_online(api, ["rev-late"])
            run = wait_done(api, run_id)
    assert run["status"] == "success", run
    assert run["cues"]["REVIEW"]["targets"] == {"rev-late": "completed"}
    assert any("no online agent matches" in w for w in run["record"]["waits"])
