"""Row 8: Redis restarted with no persistence (it comes back empty) during a run. Consumer
groups are recreated, and the affected run is failed with that reason within 5 s; nothing
hangs, and a new run on the same hub succeeds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from protocols.keys import HUB_GROUP, Keys
from tests.e2e.procs import Procs, child_env, wait_done, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import get_run, start, submit
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENT = "fx-wipe"
FAIL_WITHIN_S = 5.0
CUELIST = {
    "cuelist": "wiped",
    "cues": [{"id": "LONG", "target_agents": [AGENT], "action": {"execute_ms": 30000}}],
}
QUICK = {"cuelist": "after-wipe", "cues": [{"id": "Q", "target_agents": [AGENT]}]}


@pytest.fixture
def bare_server() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(appendonly=False) as server:
        yield server


def test_redis_back_empty_fails_the_affected_run_with_the_reason(
    bare_server: EmbeddedServer, tmp_path: Path, figure: Figure
) -> None:
    env = child_env(bare_server, CALLBOARD_LEASE_MS="1500")
    keys = Keys(env["CALLBOARD_PREFIX"])
    procs = Procs(env, tmp_path)
    agent = None
    try:
        url = procs.hub()
        agent = procs.echo(AGENT, CALLBOARD_CONCURRENCY="2")  # LONG must not block Q
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, [AGENT])
            submit(api, CUELIST)
            run_id = start(api, "wiped")
            eventually_sync(
                lambda: get_run(api, run_id).get("cues", {}).get("LONG", {}).get("state")
                == "go",
                20, message="LONG running",
            )  # fmt: skip
            bare_server.restart(wipe=True)
            up = time.monotonic()
            run = eventually_sync(
                lambda: (run := get_run(api, run_id)).get("status") in ("failed", "partial")
                and run,
                30, interval_s=0.02, message="the run failed with the reason",
            )  # fmt: skip
            failed_after_s = time.monotonic() - up
            reason = " ".join(run["record"]["errors"]) + " " + str(run["cues"]["LONG"]["error"])
            r = redis.Redis.from_url(bare_server.url)
            groups = eventually_sync(
                lambda: len(found := _groups(r, keys)) == 2 and found,
                10, message="both groups recreated",
            )  # fmt: skip
            submit(api, QUICK)  # the cuelists went with the data: submit again
            after = wait_done(api, start(api, "after-wipe"), timeout_s=30)
            r.close()
        figure(
            row=8,
            fault="Redis restarted with no persistence (back empty) during a GO",
            promise=f"groups recreated; affected run failed with that reason within "
            f"{FAIL_WITHIN_S:g} s; never hung",
            measured=f"run {run['status']} {failed_after_s:.2f} s after Redis came back "
            f"({reason.strip()[:90]!r}); groups {sorted(map(sorted, groups.values()))}; "
            f"next run {after['status']}",
        )
        assert run["status"] == "failed"
        assert "Redis lost its data" in reason
        assert failed_after_s <= FAIL_WITHIN_S
        assert groups == {keys.out(AGENT): {HUB_GROUP}, keys.inbox(AGENT): {AGENT}}
        assert after["status"] == "success"
    finally:
        if agent is not None:
            agent.kill()  # it is still sleeping through LONG: no drain to wait for
        procs.stop()


def _groups(r: redis.Redis, keys: Keys) -> dict[str, set[str]]:
    streams = (keys.out(AGENT), keys.inbox(AGENT))
    return {s: {g["name"].decode() for g in r.xinfo_groups(s)} for s in streams if r.exists(s)}
