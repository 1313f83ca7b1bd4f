"""The shared context: written by one specialist, read by another through the SDK."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes, wait_done, wait_online

pytestmark = pytest.mark.redis

CUELIST = {
    "cuelist": "whiteboard",
    "cues": [
        {
            "id": "WRITE",
            "target_agents": ["ctx-writer"],
            "action": {"context": {"build_id": "b-42", "log": "ok"}},
            "auto_follow": "READ",
        },
        {"id": "READ", "target_agents": ["ctx-reader"]},
    ],
}


def test_specialist_reads_context_by_key_tag_and_source(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    with processes(child_env(redis_server), tmp_path) as procs:
        url = procs.hub()
        procs.echo("ctx-writer")
        argv = [sys.executable, "-m", "callboard.specialist_cmd",
                "tests.e2e.agents:ContextReporter", "--agent", "ctx-reader"]  # fmt: skip
        procs.spawn("reader", argv, CALLBOARD_API_URL=url)
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, ["ctx-writer", "ctx-reader"])
            assert api.post("/v1/cuelists", json=CUELIST).status_code == 201
            run_id = api.post("/v1/runs", json={"cuelist": "whiteboard"}).json()["run_id"]
            assert wait_done(api, run_id)["status"] == "success"
            entries = api.get(f"/v1/runs/{run_id}/context").json()["entries"]
            mine = api.get(f"/v1/runs/{run_id}/context", params={"source": "ctx-reader"})
    assert entries["build_id"]["source"] == "ctx-writer"  # the authenticated sender
    seen = entries["seen"]["value"]
    assert seen["by_key"] == "b-42"
    assert seen["by_source"] == ["build_id", "log"]
    assert seen["by_tag"] == []  # echo writes no tags: the filter really filters
    assert list(mine.json()["entries"]) == ["seen"]
