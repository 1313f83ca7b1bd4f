"""Row 13: 20 concurrent POST /v1/runs with one Idempotency-Key create exactly one run, and
every request is answered with its id."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import Procs, child_env
from tests.faults.conftest import Figure
from tests.faults.tools import submit

pytestmark = pytest.mark.slow

CONCURRENT = 20
CUELIST = {"cuelist": "idem", "cues": [{"id": "A", "target_agents": ["fx-idem"]}]}


def test_concurrent_posts_with_one_key_create_one_run(
    redis_server: EmbeddedServer, tmp_path: Path, figure: Figure
) -> None:
    procs = Procs(child_env(redis_server), tmp_path)
    try:
        url = procs.hub()
        with httpx.Client(base_url=url, timeout=30) as api:
            submit(api, CUELIST)

        def post(_: int) -> tuple[int, str]:
            with httpx.Client(base_url=url, timeout=30) as client:
                r = client.post(
                    "/v1/runs", json={"cuelist": "idem"}, headers={"Idempotency-Key": "k-1"}
                )
            return r.status_code, r.json().get("run_id", r.text)

        with ThreadPoolExecutor(CONCURRENT) as pool:
            answers = list(pool.map(post, range(CONCURRENT)))
        with httpx.Client(base_url=url, timeout=30) as api:
            runs = api.get("/v1/runs", params={"cuelist": "idem"}).json()
    finally:
        procs.stop()
    statuses = Counter(status for status, _ in answers)
    ids = {run_id for _, run_id in answers}
    figure(
        row=13,
        fault=f"{CONCURRENT} concurrent POST /v1/runs with one Idempotency-Key",
        promise="exactly one run; every request gets its run_id",
        measured=f"{runs['count']} run(s) created; statuses {dict(statuses)}; "
        f"{len(ids)} distinct run_id(s) answered",
    )
    assert statuses == Counter({201: CONCURRENT}), answers
    assert len(ids) == 1
    assert runs["count"] == 1 and runs["data"][0]["run_id"] in ids
