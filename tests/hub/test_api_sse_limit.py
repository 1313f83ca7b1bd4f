"""An event stream is bounded (CALLBOARD_SSE_MAX_S); the client resumes with Last-Event-ID;
no client's position moves another's live events."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
WAITS = "cuelist: sse-waits\ncues:\n  - {id: A, target_agents: [nobody], conditions: [never]}\n"
TWO_FLAGS = WAITS.replace("sse-waits", "sse-flags") + (
    "  - {id: B, target_agents: [nobody], conditions: [later]}\n"
)


def _stream(api: httpx.Client, run_id: str, last_id: str | None = None) -> list[str]:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    with api.stream("GET", f"/v1/runs/{run_id}/events", headers=headers, timeout=30) as r:
        assert r.status_code == 200
        ids = [
            line.removeprefix("id:").strip() for line in r.iter_lines() if line.startswith("id:")
        ]
    return ids


@contextlib.contextmanager
def _a_run(
    redis_server: EmbeddedServer, tmp_path: Path, cuelist: str, max_s: str
) -> Iterator[tuple[str, httpx.Client, str]]:
    """A hub whose streams last `max_s`, and a run of `cuelist` on it: (url, client, run)."""
    env = child_env(redis_server, CALLBOARD_SSE_MAX_S=max_s)
    with processes(env, tmp_path) as procs:
        url = procs.hub()
        with httpx.Client(base_url=url, timeout=10) as api:
            headers = {"Content-Type": "application/yaml"}
            r = api.post("/v1/cuelists", content=cuelist, headers=headers)
            assert r.status_code == 201, r.text
            run_id = api.post("/v1/runs", json={"cuelist": r.json()["name"]}).json()["run_id"]
            yield url, api, run_id


def test_stream_of_a_waiting_run_ends_at_the_limit_and_resumes(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    with _a_run(redis_server, tmp_path, WAITS, "1.5") as (_, api, run_id):
        began = time.monotonic()
        first = _stream(api, run_id)  # the run waits forever for `never`
        took = time.monotonic() - began
        assert first and 1.4 < took < 6, took  # ended by the limit, not by the run
        api.post(f"/v1/runs/{run_id}/conditions/never")  # something new happens
        resumed = _stream(api, run_id, first[-1])
        assert resumed and not set(resumed) & set(first)  # from where it stopped


def _streams_open(api: httpx.Client, n: int) -> bool:
    found = re.search(r"^callboard_event_streams (\S+)$", api.get("/metrics").text, re.M)
    return found is not None and float(found.group(1)) == n


def _follow(url: str, run_id: str, after: str | None, kinds: list[str]) -> None:
    """The kinds of the events a client is sent, until the hub ends the stream (or stops)."""
    params = {"after": after} if after else {}
    path = f"/v1/runs/{run_id}/events"
    with (
        contextlib.suppress(httpx.TransportError),
        httpx.Client(base_url=url) as client,
        client.stream("GET", path, params=params, timeout=30) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("event:"):
                kinds.append(line.removeprefix("event:").strip())


def test_a_client_asking_from_the_future_does_not_stall_the_others(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    # The first follower's position was the run's shared read position: one from the
    # future (`after=9999999999999-0`) froze every follower's live events, the desk's too.
    with _a_run(redis_server, tmp_path, TWO_FLAGS, "20") as (url, api, run_id):
        ahead: list[str] = []
        threading.Thread(
            target=_follow, args=(url, run_id, "9999999999999-0", ahead), daemon=True
        ).start()
        eventually_sync(lambda: _streams_open(api, 1), 10, message="the first stream")
        seen: list[str] = []
        threading.Thread(target=_follow, args=(url, run_id, None, seen), daemon=True).start()
        eventually_sync(lambda: _streams_open(api, 2), 10, message="the second stream")
        replayed = len(eventually_sync(lambda: seen, 10, message="the replay"))
        assert api.post(f"/v1/runs/{run_id}/conditions/never").status_code == 200
        live = eventually_sync(lambda: seen[replayed:], 10, message="no live event came")
        assert "condition" in live or "cue" in live, live
        assert ahead == []  # its own position: nothing before it
        api.post(f"/v1/runs/{run_id}/cancel")
