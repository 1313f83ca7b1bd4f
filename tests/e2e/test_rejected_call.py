"""A real SDK specialist that cannot take its cue's call (here: an assignment past its own
message size limit) rejects it, and the cue fails at once with the reason, not after the
GO's ten-minute timeout."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes, wait_done, wait_online

pytestmark = pytest.mark.redis

CUELIST = {
    "cuelist": "too-big",
    "cues": [
        {"id": "BIG", "target_agents": ["tiny"], "coordination": "direct",
         "action": {"blob": "x" * 5_000}},
    ],
}  # fmt: skip


def test_an_assignment_the_specialist_rejects_fails_its_cue_at_once(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    with processes(child_env(redis_server), tmp_path) as procs:
        url = procs.hub()
        procs.echo("tiny", CALLBOARD_MAX_MESSAGE_BYTES="2000")
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, ["tiny"])
            assert api.post("/v1/cuelists", json=CUELIST).status_code == 201
            run_id = api.post("/v1/runs", json={"cuelist": "too-big"}).json()["run_id"]
            run = wait_done(api, run_id, timeout_s=20)  # the GO's own timeout: 600 s
            letters = api.get("/v1/deadletters").json()["data"]
    assert run["status"] == "failed"
    error = run["cues"]["BIG"]["error"]  # type: ignore[index]
    assert error.startswith("tiny rejected its task.assign (dead letter ")
    assert "2000" in error  # the specialist's own reason: over its limit
    assert any(letter["reason"].startswith("rejected by tiny") for letter in letters)
