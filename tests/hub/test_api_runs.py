"""Runs through the REST API against a real hub and echo specialists, each its own process."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from hub.store.idempotency import PENDING_TTL_S
from protocols.keys import Keys
from tests.e2e.procs import child_env, processes, sse_events, wait_done, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
AGENTS = ["api-alpha", "api-beta", "api-gamma"]  # gamma: the slow one that gets cancelled

SIMPLE = """
cuelist: api-simple
cues:
  - id: CUE-1
    target_agents: [api-alpha]
    action: {context: {greeting: hello}}
    auto_follow: CUE-2
  - id: CUE-2
    target_agents: [api-beta]
    action: {execute_ms: 10}
"""
MANUAL = """
cuelist: api-manual
cues:
  - id: CUE-1
    target_agents: [api-alpha]
    action: {execute_ms: 1500}
  - id: CUE-2
    target_agents: [api-beta]
    depends_on: [CUE-1]
    manual: true
"""
APPROVAL = """
cuelist: api-approval
cues:
  - id: CUE-1
    target_agents: [api-alpha]
    conditions: [approval_received]
"""
# a condition's name may hold "/" (NAME_PATTERN): the route takes the rest of the path
SLASHED = """
cuelist: api-slashed
cues:
  - id: CUE-1
    target_agents: [api-alpha]
    conditions: [legal/ok]
"""
SLOW = """
cuelist: api-slow
cues:
  - id: CUE-1
    target_agents: [api-gamma]
    action: {execute_ms: 60000}
  - id: CUE-2
    target_agents: [api-gamma]
    depends_on: [CUE-1]
"""
ARBITRATION = """
cuelist: api-arbitration
conflict_strategy: arbitration
start: [CUE-A, CUE-B]
cues:
  - id: CUE-A
    target_agents: [api-alpha]
    resources: [shared-db]
    priority: 1
    action: {execute_ms: 300}
  - id: CUE-B
    target_agents: [api-beta]
    resources: [shared-db]
    priority: 9
    action: {execute_ms: 300}
"""
INVALID = """
cuelist: api-invalid
cues:
  - id: CUE-1
    target_agents: [api-alpha]
    colour: blue
"""


@pytest.fixture(scope="module")
def stack(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    env = child_env(redis_server)
    with processes(env, tmp_path_factory.mktemp("runs")) as procs:
        url = procs.hub()
        echoes = {agent: procs.echo(agent) for agent in AGENTS}
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_online(client, AGENTS)
            for text in (SIMPLE, MANUAL, APPROVAL, SLASHED, SLOW, ARBITRATION):
                r = client.post(
                    "/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"}
                )
                assert r.status_code == 201, r.text
            yield {"url": url, "env": env, "procs": procs, "echoes": echoes}


@pytest.fixture
def api(stack: dict[str, Any]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack["url"], timeout=30) as client:
        yield client


def start(api: httpx.Client, name: str, **body: Any) -> str:
    r = api.post("/v1/runs", json={"cuelist": name, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def cue_state(api: httpx.Client, run_id: str, cue: str, state: str) -> dict[str, Any] | None:
    run = api.get(f"/v1/runs/{run_id}").json()
    return run if run["cues"][cue]["state"] == state else None


def test_submit_is_idempotent_per_version_and_listed(api: httpx.Client) -> None:
    r = api.post("/v1/cuelists", content=SIMPLE, headers={"Content-Type": "text/yaml"})
    assert r.status_code == 201
    body = r.json()
    assert body["name"] == "api-simple" and len(body["version"]) == 64
    assert body["created"] is False
    described = api.get("/v1/cuelists/api-simple").json()
    assert described["latest"] == body["version"]
    assert described["versions"][0]["source"].strip().startswith("cuelist: api-simple")
    names = {c["name"] for c in api.get("/v1/cuelists").json()["data"]}
    assert {"api-simple", "api-manual"} <= names


def test_json_submission_and_validate(api: httpx.Client) -> None:
    doc = {"cuelist": "api-json", "cues": [{"id": "CUE-1", "target_agents": ["api-alpha"]}]}
    r = api.post("/v1/cuelists", json=doc)
    assert r.status_code == 201, r.text
    r = api.post(
        "/v1/cuelists/validate", content=INVALID, headers={"Content-Type": "application/yaml"}
    )
    assert r.status_code == 200
    assert r.json()["valid"] is False and r.json()["errors"]
    r = api.post(
        "/v1/cuelists/validate", content=SIMPLE, headers={"Content-Type": "application/yaml"}
    )
    assert r.json()["valid"] is True and r.json()["errors"] == []


def test_422_names_the_cue_and_the_key(api: httpx.Client) -> None:
    r = api.post("/v1/cuelists", content=INVALID, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422
    body = r.json()
    assert body["detail"]
    assert any(e["cue"] == "CUE-1" and "colour" in (e["key"] or "") for e in body["errors"]), body
    assert all({"code", "message", "cue", "key", "line"} <= set(e) for e in body["errors"])
    r = api.post(
        "/v1/cuelists", content=b"cues: [unclosed", headers={"Content-Type": "application/yaml"}
    )
    assert r.status_code == 422 and r.json()["errors"]
    r = api.post("/v1/cuelists", content=b"\xff\xfe", headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422
    r = api.post("/v1/cuelists", content=b"[1, 2]", headers={"Content-Type": "application/json"})
    assert r.status_code == 422


def test_a_json_cuelist_with_a_duplicate_key_is_refused_like_yaml(api: httpx.Client) -> None:
    json_body = (
        b'{"cuelist": "api-dup",\n "cues": [{"id": "A", "target_agents": ["a"],\n  "id": "B"}]}'
    )
    yaml_body = b"cuelist: api-dup\ncues:\n  - id: A\n    target_agents: [a]\n    id: B\n"
    found = {}
    for media, body in [("application/json", json_body), ("application/yaml", yaml_body)]:
        r = api.post("/v1/cuelists", content=body, headers={"Content-Type": media})
        assert r.status_code == 422 and r.json()["detail"], r.text
        [issue] = [e for e in r.json()["errors"] if e["code"] == "duplicate_key"]
        found[media] = issue
        checked = api.post("/v1/cuelists/validate", content=body, headers={"Content-Type": media})
        assert checked.json()["valid"] is False
    assert found["application/json"]["message"] == "key 'id' appears twice in one mapping"
    assert found["application/json"]["message"] == found["application/yaml"]["message"]
    assert (found["application/json"]["line"], found["application/yaml"]["line"]) == (3, 5)
    assert api.get("/v1/cuelists/api-dup").status_code == 404  # nothing stored


def test_run_to_completion_with_events_and_context(api: httpx.Client) -> None:
    run_id = start(api, "api-simple")
    events = sse_events(api, run_id)
    assert events[-1]["event"] == "run" and events[-1]["status"] == "success"
    cue_events = [(e["cue"], e["state"]) for e in events if e["event"] == "cue"]
    assert ("CUE-1", "completed") in cue_events and ("CUE-2", "completed") in cue_events
    run = wait_done(api, run_id)
    assert run["status"] == "success"
    assert run["started_at"].endswith("Z") and run["completed_at"].endswith("Z")
    cue = run["cues"]["CUE-2"]
    assert cue["fired_by"] == "auto-follow"
    assert cue["targets"] == {"api-beta": "completed"}
    assert cue["warned_at"].endswith("Z") and cue["go_at"] and cue["completed_at"]
    assert run["record"]["counts"] == {"completed": 2}
    assert run["record"]["fired"] == ["CUE-1", "CUE-2"]
    ctx = api.get(f"/v1/runs/{run_id}/context").json()
    assert ctx["entries"]["greeting"]["value"] == "hello"
    assert ctx["entries"]["greeting"]["source"] == "api-alpha"
    assert api.get(f"/v1/runs/{run_id}/context", params={"source": "api-beta"}).json()["count"] == 0
    assert api.get(f"/v1/runs/{run_id}/context", params={"tag": "nope"}).json()["count"] == 0
    # a finished run's stream replays and ends at once; Last-Event-ID resumes after an event
    again = sse_events(api, run_id)
    assert [e["event"] for e in again] == [e["event"] for e in events]
    resumed = api.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": "0-0"})
    assert resumed.status_code == 200
    assert api.post(f"/v1/runs/{run_id}/cues/CUE-1/go").status_code == 409
    assert api.post(f"/v1/runs/{run_id}/cancel").status_code == 409
    listed = api.get("/v1/runs", params={"cuelist": "api-simple"}).json()["data"]
    assert run_id in {r["run_id"] for r in listed}


def _stream_ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [line[3:].strip() for line in response.text.splitlines() if line.startswith("id:")]


def test_a_stream_starts_after_the_event_id_asked_for(api: httpx.Client) -> None:
    """`after` (the desk's page: the newest event its state holds) starts the stream after
    that event; a reconnecting client's Last-Event-ID wins over it; an id Redis would not
    take is a JSON 422."""
    run_id = start(api, "api-simple")
    wait_done(api, run_id)
    url = f"/v1/runs/{run_id}/events"
    ids = _stream_ids(api.get(url))
    assert len(ids) >= 4
    assert _stream_ids(api.get(url, params={"after": ids[1]})) == ids[2:]
    resumed = api.get(url, params={"after": ids[0]}, headers={"Last-Event-ID": ids[2]})
    assert _stream_ids(resumed) == ids[3:]
    for bad in ("99999999999999999999-0", "1-2-3", "x"):
        for asked in ({"params": {"after": bad}}, {"headers": {"Last-Event-ID": bad}}):
            refused = api.get(url, **asked)  # type: ignore[arg-type]
            assert refused.status_code == 422, (bad, refused.text)
            assert "detail" in refused.json()


def test_manual_go_409_with_reason_until_armed(api: httpx.Client) -> None:
    run_id = start(api, "api-manual")
    r = api.post(f"/v1/runs/{run_id}/cues/CUE-2/go")
    assert r.status_code == 409
    assert "CUE-2" in r.json()["detail"] and "CUE-1" in r.json()["detail"]
    assert api.post(f"/v1/runs/{run_id}/cues/CUE-9/go").status_code == 404
    run = eventually_sync(lambda: cue_state(api, run_id, "CUE-2", "armed"), 20, interval_s=0.05)
    assert "GO" in run["cues"]["CUE-2"]["reason"]
    r = api.post(f"/v1/runs/{run_id}/cues/CUE-2/go")
    assert r.status_code == 200, r.text
    assert r.json()["cue"] == "CUE-2"
    run = wait_done(api, run_id)
    assert run["status"] == "success"
    assert run["cues"]["CUE-2"]["fired_by"] == "operator"


def test_approval_condition(api: httpx.Client) -> None:
    run_id = start(api, "api-approval")
    run = eventually_sync(lambda: cue_state(api, run_id, "CUE-1", "waiting"), 10, interval_s=0.05)
    assert "approval_received" in run["cues"]["CUE-1"]["reason"]
    r = api.post(f"/v1/runs/{run_id}/conditions/approval_received")
    assert r.status_code == 200
    assert r.json()["conditions"] == ["approval_received"]
    assert wait_done(api, run_id)["status"] == "success"


@pytest.mark.parametrize("sent", ["legal/ok", "legal%2Fok"])
def test_a_condition_whose_name_holds_a_slash_is_raised(api: httpx.Client, sent: str) -> None:
    # it was a 404 either way: "%2F" is decoded before routing, and {name} is one segment
    run_id = start(api, "api-slashed")
    eventually_sync(lambda: cue_state(api, run_id, "CUE-1", "waiting"), 10, interval_s=0.05)
    r = api.post(f"/v1/runs/{run_id}/conditions/{sent}")
    assert r.status_code == 200, r.text
    assert r.json()["condition"] == "legal/ok" and r.json()["conditions"] == ["legal/ok"]
    assert wait_done(api, run_id)["status"] == "success"
    other = start(api, "api-slashed")
    r = api.post(f"/v1/runs/{other}/conditions/legal/other")
    assert r.status_code == 422, r.text  # a name no cue waits for
    assert r.json()["conditions"] == ["legal/ok"]
    assert api.post(f"/v1/runs/{other}/cancel").status_code == 200


def test_cancel_stands_down_and_ends_the_stream(api: httpx.Client, stack: dict[str, Any]) -> None:
    run_id = start(api, "api-slow")
    eventually_sync(lambda: cue_state(api, run_id, "CUE-1", "go"), 10, interval_s=0.05)
    result: list[list[dict[str, Any]]] = []
    reader = threading.Thread(target=lambda: result.append(sse_events(api, run_id)))
    reader.start()
    r = api.post(f"/v1/runs/{run_id}/cancel", json={"reason": "test says stop"})
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    reader.join(20)
    assert not reader.is_alive(), "event stream did not end after cancel"
    assert result[0][-1]["status"] == "cancelled"
    run = api.get(f"/v1/runs/{run_id}").json()
    assert {c["state"] for c in run["cues"].values()} == {"cancelled"}
    assert run["cues"]["CUE-2"]["reason"] == "test says stop"
    stack["echoes"]["api-gamma"].kill()  # its 60 s GO would only delay the module's teardown


def test_arbitration_resolved_through_the_api(api: httpx.Client) -> None:
    run_id = start(api, "api-arbitration")

    def open_conflict() -> dict[str, Any] | None:
        escs = api.get("/v1/escalations", params={"run_id": run_id, "status": "open"}).json()
        return next((e for e in escs["data"] if e["type"].endswith("conflict")), None)

    esc = eventually_sync(open_conflict, 20, interval_s=0.05)
    assert esc["payload"]["suggested_winner"] is not None
    waiting = [c for c in esc["payload"]["cues_involved"] if c.split("/")[1] != "CUE-A"]
    r = api.post(f"/v1/escalations/{esc['id']}/resolve", json={"winner": waiting[0], "note": "ok"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "resolved" and r.json()["resolution"]["note"] == "ok"
    again = api.post(f"/v1/escalations/{esc['id']}/resolve", json={})
    assert again.status_code == 409
    assert wait_done(api, run_id)["status"] == "success"


def test_dry_run(api: httpx.Client) -> None:
    run_id = start(api, "api-simple", dry=True)
    run = wait_done(api, run_id)
    assert run["status"] == "dry" and run["dry"] is True
    assert run["record"]["fired"] == ["CUE-1", "CUE-2"]


@pytest.mark.parametrize("dry", [1, "true", "yes", None])
def test_a_value_of_another_json_type_is_refused_not_coerced(
    api: httpx.Client, dry: object
) -> None:
    # pydantic's lax mode would take 1, "true" and "yes" as true: a typo must not start a
    # real run that was meant to be dry, or the other way round
    r = api.post("/v1/runs", json={"cuelist": "api-simple", "dry": dry})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["key"] == "dry"


def test_one_idempotency_key_from_20_concurrent_clients_makes_one_run(
    stack: dict[str, Any],
) -> None:
    ids: list[str] = []
    barrier = threading.Barrier(20)

    def client() -> None:
        with httpx.Client(base_url=stack["url"], timeout=30) as c:
            barrier.wait()
            r = c.post(
                "/v1/runs", json={"cuelist": "api-approval"}, headers={"Idempotency-Key": "k-20"}
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["run_id"])

    threads = [threading.Thread(target=client) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(ids) == 20 and len(set(ids)) == 1
    with httpx.Client(base_url=stack["url"]) as c:
        runs = c.get("/v1/runs", params={"cuelist": "api-approval", "limit": 1000}).json()["data"]
        assert sum(1 for r in runs if r["run_id"] == ids[0]) == 1
        r = c.post("/v1/runs", json={"cuelist": "api-simple"}, headers={"Idempotency-Key": "k-20"})
        assert r.status_code == 409  # one key, another request
        c.post(f"/v1/runs/{ids[0]}/cancel")


def test_an_idempotency_key_names_its_started_run_for_a_day(stack: dict[str, Any]) -> None:
    """The key holds the run id for PENDING_TTL_S until the run is written; the leader's
    write of the run makes it name the started run for DONE_TTL_S."""
    keys = Keys(stack["env"]["CALLBOARD_PREFIX"])
    with httpx.Client(base_url=stack["url"], timeout=30) as c:
        r = c.post("/v1/runs", json={"cuelist": "api-simple"}, headers={"Idempotency-Key": "k-day"})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
    with redis.Redis.from_url(stack["env"]["REDIS_URL"]) as client:
        held = json.loads(client.get(keys.idempotency("k-day")))
        ttl_s = client.ttl(keys.idempotency("k-day"))
    assert held["run_id"] == run_id and held["started"] is True
    assert ttl_s > PENDING_TTL_S


def test_dead_letters_and_agents(api: httpx.Client, stack: dict[str, Any]) -> None:
    keys = Keys(stack["env"]["CALLBOARD_PREFIX"])
    with redis.Redis.from_url(stack["env"]["REDIS_URL"]) as client:
        client.xadd(keys.out("api-alpha"), {"m": b"{not json"})

    def lettered() -> list[dict[str, Any]]:
        return [d for d in api.get("/v1/deadletters").json()["data"] if "not json" in d["raw_text"]]

    letter = eventually_sync(lettered, 10, interval_s=0.05)[0]
    assert letter["reason"] and letter["stream"] == keys.out("api-alpha")
    agents = {a["agent"]: a for a in api.get("/v1/agents").json()["data"]}
    assert agents["api-alpha"]["kind"] == "echo" and agents["api-alpha"]["replicas"][0]["last_seen"]
    wiring = api.get("/v1/wiring").json()
    assert {"api-alpha", "api-beta"} <= {a["agent"] for a in wiring["agents"]}
    assert (
        "api-simple/CUE-1" in next(a for a in wiring["agents"] if a["agent"] == "api-alpha")["cues"]
    )


def test_dead_letters_are_paged_and_bounded(api: httpx.Client, stack: dict[str, Any]) -> None:
    keys = Keys(stack["env"]["CALLBOARD_PREFIX"])
    big = b"{" + b"x" * (1024 * 1024)  # 1 MiB of garbage: the letter keeps 4 KiB of it
    with redis.Redis.from_url(stack["env"]["REDIS_URL"]) as client:
        for i in range(5):
            client.xadd(keys.out("api-pager"), {"m": b"{page %d" % i})
        client.xadd(keys.out("api-pager"), {"m": big})

    def mine(page: dict[str, Any]) -> list[dict[str, Any]]:
        return [d for d in page["data"] if d["stream"] == keys.out("api-pager")]

    eventually_sync(lambda: len(mine(api.get("/v1/deadletters").json())) >= 6, 10, interval_s=0.05)
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 2}
    while True:
        page = api.get("/v1/deadletters", params=params).json()
        assert page["count"] == len(page["data"]) <= 2
        seen += page["data"]
        if page["next"] is None:
            break
        params["before"] = page["next"]
    assert len({d["id"] for d in seen}) == len(seen)  # no letter twice across pages
    ids = [d["id"] for d in seen]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))), reverse=True)
    [huge] = [d for d in mine({"data": seen}) if d["raw_size"] > 4096]
    assert huge["raw_truncated"] and len(huge["raw_text"]) == 4096
    assert huge["raw_size"] == len(big) and huge["sender"] == "api-pager"
    for first in ("0-0", "00-000"):  # nothing is older than the first id
        assert api.get("/v1/deadletters", params={"before": first}).json()["data"] == []
    for bad in ({"limit": 101}, {"before": "+"}, {"before": "1-0\n"}, {"before": "9" * 20 + "-0"}):
        r = api.get("/v1/deadletters", params=bad)
        assert r.status_code == 422 and "detail" in r.json()


BIG = "9" * 400  # past any total a run keeps (int64); float() of it overflows


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("budget", f'{{"tokens": {BIG}}}'),
        ("runs", f'{{"cuelist": "api-approval", "budget": {{"counters": {{"x": {BIG}}}}}}}'),
    ],
)
def test_a_limit_past_what_a_total_holds_is_a_422_and_the_engine_goes_on(
    api: httpx.Client, path: str, body: str
) -> None:
    # it passed the API, then crashed the leader's commands task on each read of the
    # command (an OverflowError writing "budget tokens ..."): three terms ended for one
    # request, every run stalled meanwhile, and the caller got a 409 after 5 s
    run_id = start(api, "api-approval")
    url = f"/v1/runs/{run_id}/budget" if path == "budget" else "/v1/runs"
    r = api.post(url, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["key"].endswith(("tokens", "x")), r.json()
    yaml = (
        f"cuelist: api-big\nbudget: {{tokens: {BIG}}}\ncues:\n  - {{id: A, target_agents: [x]}}\n"
    )
    r = api.post("/v1/cuelists", content=yaml, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json()["errors"][0]["key"] == "budget.tokens", r.text
    r = api.post(f"/v1/runs/{run_id}/budget", json={"tokens": 2**53 - 1})
    assert r.status_code == 200, r.text  # the largest limit, answered at once
    r = api.post(f"/v1/runs/{run_id}/budget", json={"tokens": 2**53})
    assert r.status_code == 422, r.text
    assert api.post(f"/v1/runs/{run_id}/cancel").status_code == 200


def test_a_key_sent_again_with_another_null_is_a_409_and_key_order_is_not_another(
    api: httpx.Client,
) -> None:
    # the key compared every field's value: one left out and one sent as null (which in a
    # budget removes a limit) were the same, so the second request was answered with the
    # first's reply and did nothing
    run_id = start(api, "api-approval")
    url, key = f"/v1/runs/{run_id}/budget", {"Idempotency-Key": f"nulls-{run_id}"}
    first = api.post(url, json={"tokens": 5, "cost": None}, headers=key)
    assert first.status_code == 200, first.text
    json_ = {"Content-Type": "application/json", **key}
    same = api.post(url, content=b'{"cost": null, "tokens": 5}', headers=json_)
    assert same.status_code == 200 and same.json()["budget"] == first.json()["budget"], same.text
    other = api.post(url, json={"tokens": 5, "messages": None}, headers=key)
    assert other.status_code == 409 and "different request" in other.json()["detail"], other.text
    assert api.post(f"/v1/runs/{run_id}/cancel").status_code == 200


def test_a_condition_as_long_as_a_cuelist_allows_is_raised(api: httpx.Client) -> None:
    # the route took 200 characters of a name the cuelist allows 256 of: such a run could
    # only be cancelled
    flag = "f" * 256
    cue = f"{{id: A, target_agents: [api-alpha], conditions: [{flag}]}}"
    yaml = f"cuelist: api-long-flag\ncues:\n  - {cue}\n"
    r = api.post("/v1/cuelists", content=yaml, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    run_id = start(api, "api-long-flag")
    eventually_sync(lambda: cue_state(api, run_id, "A", "waiting"), 10, interval_s=0.05)
    r = api.post(f"/v1/runs/{run_id}/conditions/{flag}")
    assert r.status_code == 200 and r.json()["conditions"] == [flag], r.text
    assert wait_done(api, run_id)["status"] == "success"
    assert api.post(f"/v1/runs/{run_id}/conditions/{flag}f").status_code == 422


DEEP = '{"a": ' * 100 + "1" + "}" * 100


@pytest.mark.parametrize(
    ("url", "body", "key"),
    [
        ("/v1/runs", '{"cuelist": "api-simple", "params": {"a": "\\ud83d"}}', "params"),
        ("/v1/runs", '{"cuelist": "api-simple", "dry": true, "params": {"\\ud83d": 1}}', "params"),
        ("/v1/runs", f'{{"cuelist": "api-simple", "params": {DEEP}}}', "params"),
        ("/v1/broadcasts", '{"message_type": "broadcast.notice", "payload": {"text": "\\ud83d"}}',
         "payload"),
    ],
    ids=["surrogate", "surrogate-key", "deep", "broadcast"],
)  # fmt: skip
def test_free_form_json_a_command_cannot_carry_is_a_422(
    api: httpx.Client, url: str, body: str, key: str
) -> None:
    # a lone surrogate was a 500 with a traceback (the command could not be written as
    # UTF-8), and deep nesting either a 500 or a command the engine could not read (404)
    for keyed in ({}, {"Idempotency-Key": f"plain-{key}-{len(body)}"}):
        headers = {"Content-Type": "application/json", **keyed}
        r = api.post(url, content=body.encode(), headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["key"].startswith(key), r.json()
