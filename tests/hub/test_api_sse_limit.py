"""An event stream is bounded (CALLBOARD_SSE_MAX_S); the client resumes with Last-Event-ID."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes

pytestmark = pytest.mark.redis
WAITS = "cuelist: sse-waits\ncues:\n  - {id: A, target_agents: [nobody], conditions: [never]}\n"


def _stream(api: httpx.Client, run_id: str, last_id: str | None = None) -> list[str]:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    with api.stream("GET", f"/v1/runs/{run_id}/events", headers=headers, timeout=30) as r:
        assert r.status_code == 200
        ids = [
            line.removeprefix("id:").strip() for line in r.iter_lines() if line.startswith("id:")
        ]
    return ids


def test_stream_of_a_waiting_run_ends_at_the_limit_and_resumes(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    env = child_env(redis_server, CALLBOARD_SSE_MAX_S="1.5")
    with processes(env, tmp_path) as procs:
        url = procs.hub()
        with httpx.Client(base_url=url, timeout=10) as api:
            headers = {"Content-Type": "application/yaml"}
            assert api.post("/v1/cuelists", content=WAITS, headers=headers).status_code == 201
            run_id = api.post("/v1/runs", json={"cuelist": "sse-waits"}).json()["run_id"]
            began = time.monotonic()
            first = _stream(api, run_id)  # the run waits forever for `never`
            took = time.monotonic() - began
            assert first and 1.4 < took < 6, took  # ended by the limit, not by the run
            api.post(f"/v1/runs/{run_id}/conditions/never")  # something new happens
            resumed = _stream(api, run_id, first[-1])
            assert resumed and not set(resumed) & set(first)  # from where it stopped
