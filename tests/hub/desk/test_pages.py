"""The desk's pages over HTTP on a real hub, with what they get that is odd: a context time
before year 1, a dead letter whose envelope is not strings, a query value a page refuses,
and a finished run whose cuelist version was deleted since."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from tests.e2e.procs import child_env, processes, wait_done, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
AGENT = "specialist-pages"
# its one cue waits for a condition nobody raises: the run stays open, its agent never called
WAITS = """
cuelist: {name}
cues:
  - {{id: A-100, target_agents: [{agent}], conditions: [never]}}
"""


class Hub:
    def __init__(self, api: httpx.Client, redis_url: str, prefix: str) -> None:
        self.api = api
        self.redis_url = redis_url
        self.keys = Keys(prefix)

    def cuelist(self) -> str:
        name = f"pages-{uuid.uuid4().hex[:8]}"
        text = WAITS.format(name=name, agent=AGENT)
        r = self.api.post("/v1/cuelists", content=text, headers={"Content-Type": "text/yaml"})
        assert r.status_code == 201, r.text
        return name

    def waiting_run(self) -> tuple[str, str]:
        """(cuelist, run id) of a run that has started and waits for its condition."""
        name = self.cuelist()
        r = self.api.post("/v1/runs", json={"cuelist": name})
        assert r.status_code == 201, r.text
        run_id: str = r.json()["run_id"]
        eventually_sync(
            lambda: self.api.get(f"/v1/runs/{run_id}").json()["cues"]["A-100"]["state"]
            == "waiting",
            20, message="the run started",
        )  # fmt: skip
        return name, run_id

    def send(self, body: str) -> None:
        """What the agent writes to the hub, as it wrote it."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            client.xadd(self.keys.out(AGENT), {"m": body})
        finally:
            client.close()

    def deleted_long_ago(self, name: str, version: str) -> None:
        client = redis.Redis.from_url(self.redis_url)
        try:
            member = {f"{name} {version}": 1.0}
            assert client.zadd(self.keys.deleted_versions, member, xx=True, ch=True)
        finally:
            client.close()

    def stored(self, name: str, version: str) -> bool:
        client = redis.Redis.from_url(self.redis_url)
        try:
            return bool(client.hexists(self.keys.cuelist(name), version))
        finally:
            client.close()


@pytest.fixture(scope="module")
def hub(redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    env = child_env(redis_server)
    with processes(env, tmp_path_factory.mktemp("desk-pages")) as procs:
        url = procs.hub()
        procs.echo(AGENT)
        with httpx.Client(base_url=url, timeout=30) as api:
            wait_online(api, [AGENT])
            yield Hub(api, redis_server.url, env["CALLBOARD_PREFIX"])


def test_a_context_time_before_year_one_is_shown_as_its_number(hub: Hub) -> None:
    """A context entry's time is the agent's sent_at: 0001-01-01T00:00:00+14:00 is valid
    RFC 3339 and lies before year 1 in UTC. The run's page and its parts show the number."""
    _, run_id = hub.waiting_run()
    hub.send(json.dumps({
        "message_id": uuid.uuid4().hex, "message_type": "task.context", "from_agent": AGENT,
        "run_id": run_id, "cue_id": "A-100", "sent_at": "0001-01-01T00:00:00+14:00",
        "payload": {"key": "note", "value": "hi"}, "v": 1,
    }))  # fmt: skip
    eventually_sync(
        lambda: hub.api.get(f"/v1/runs/{run_id}/context").json()["entries"],
        20, message="the context entry written",
    )  # fmt: skip
    page = hub.api.get(f"/runs/{run_id}")
    assert page.status_code == 200, page.text
    assert "-62135647200.0</time>" in page.text  # 14 hours before 0001-01-01T00:00:00Z
    parts = hub.api.get(f"/runs/{run_id}/parts", params={"cues": "*"})
    assert parts.status_code == 200, parts.text
    assert "-62135647200.0" in parts.json()["parts"]["context"]
    hub.api.post(f"/v1/runs/{run_id}/cancel")


def test_dead_letters_whose_envelope_is_not_strings_are_listed(hub: Hub) -> None:
    """A dead letter was refused for being malformed: its run_id may be a number, and its
    body may nest deeper than Python's json parses. The page lists both, with their bytes."""
    numeric = json.dumps({"message_type": "status.exploded", "run_id": 12345, "payload": {}})
    nested = "[" * 3000
    for body in (numeric, nested):
        hub.send(body)

    def listed() -> bool:
        letters = hub.api.get("/v1/deadletters").json()["data"]
        return {numeric, nested} <= {d["raw_text"] for d in letters}

    eventually_sync(listed, 20, message="both dead-lettered")
    r = hub.api.get("/deadletters")
    assert r.status_code == 200, r.text
    assert "status.exploded" in r.text  # the type, a string, is shown
    assert 'href="/runs/12345"' not in r.text  # a number is no run to link to


@pytest.mark.parametrize(
    ("path", "field"),
    [("/?page=abc", "page"), ("/?page=0", "page"), ("/cuelists/x?version=" + "v" * 300, "version"),
     ("/login?next=" + "/" * 3000, "next")],
)  # fmt: skip
def test_a_query_value_a_page_refuses_gets_the_desks_own_page(
    hub: Hub, path: str, field: str
) -> None:
    r = hub.api.get(path)
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("text/html")
    assert "<h1>Bad request</h1>" in r.text and f"({field}: " in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]  # a desk page's headers


def test_the_api_and_the_pages_parts_keep_their_json_422(hub: Hub) -> None:
    for path in ["/v1/runs?limit=abc", "/board/parts?page=abc"]:
        r = hub.api.get(path)
        assert r.status_code == 422, path
        assert r.json()["errors"][0]["key"] == "query." + path.rsplit("?", 1)[1].split("=")[0]


def test_a_finished_run_of_a_deleted_cuelist_shows_its_own_record(hub: Hub) -> None:
    """The API still answers for the run; so does the desk, from the run's record, with a
    note that its version is gone and none of the cuelist's parts (graph, links, rerun)."""
    name, run_id = hub.waiting_run()
    hub.api.post(f"/v1/runs/{run_id}/cancel")
    run: dict[str, Any] = wait_done(hub.api, run_id)
    version = str(run["version"])
    assert hub.api.delete(f"/v1/cuelists/{name}").status_code == 200
    # a version is kept while an active run is pinned to it, and DELETED_KEPT_S (passed
    # here: its deletion dated back); the leader's sweep (every 30 s) takes it then
    hub.deleted_long_ago(name, version)
    eventually_sync(lambda: not hub.stored(name, version), 40, message="the version swept")
    assert hub.api.get(f"/v1/runs/{run_id}").status_code == 200
    page = hub.api.get(f"/runs/{run_id}")
    assert page.status_code == 200, page.text
    assert "data-version-gone" in page.text and "is deleted" in page.text
    assert 'tr id="cue-A-100"' in page.text and "st-cancelled" in page.text  # its own cues
    assert "/cuelists/" not in page.text.split("<main", 1)[1]  # no link to a missing page
    assert "Rerun" not in page.text and "dag-svg" not in page.text
    parts = hub.api.get(f"/runs/{run_id}/parts", params={"cues": "*"})
    assert parts.status_code == 200, parts.text
    assert parts.json()["status"] == "cancelled" and "A-100" in parts.json()["rows"]
