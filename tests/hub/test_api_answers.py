"""The API's answers of issue 13 against a real hub and echo specialists (each a process):
results and holding as GET /v1/runs/{id} shows them, a condition nothing waits for,
deleting cuelists, pausing schedules, retry and rerun, and the wiring map."""

from __future__ import annotations

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
AGENTS = ["ans-code", "ans-test"]

HANDOFFS = """
cuelist: ans-handoffs
specialists:
  ans-code: {provides: [implemented_code], handoff_to: [ans-test]}
  ans-test: {requires: [implemented_code]}
cues:
  - id: CODE
    target_agents: [ans-code]
    action: {handoff: {to: ans-test, context: {implemented_code: src/x.py}}}
    handoff: {to: ans-test}
    auto_follow: TEST
  - id: TEST
    target_agents: [ans-test]
"""


@pytest.fixture(scope="module")
def stack(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    env = child_env(redis_server)
    with processes(env, tmp_path_factory.mktemp("answers")) as procs:
        url = procs.hub()
        for agent in AGENTS:
            procs.echo(agent)
        with httpx.Client(base_url=url, timeout=30) as client:
            wait_online(client, AGENTS)
            yield {"url": url, "procs": procs, "env": env}


@pytest.fixture
def api(stack: dict[str, Any]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack["url"], timeout=30) as client:
        yield client


def submit(api: httpx.Client, text: str) -> str:
    r = api.post("/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    return str(r.json()["version"])


def start(api: httpx.Client, name: str, **body: Any) -> str:
    r = api.post("/v1/runs", json={"cuelist": name, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


def run_of(api: httpx.Client, run_id: str) -> dict[str, Any]:
    r = api.get(f"/v1/runs/{run_id}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def when(api: httpx.Client, run_id: str, test: Any, what: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run = run_of(api, run_id)
        return run if test(run) else None

    found: dict[str, Any] = eventually_sync(check, 30, interval_s=0.05, message=what)
    return found


def test_a_handoff_edge_is_drawn_once_in_mermaid(api: httpx.Client) -> None:
    """ans-code -> ans-test is declared twice (its contract's handoff_to, and cue CODE):
    one edge in the JSON map (naming both), one arrow in the mermaid chart."""
    submit(api, HANDOFFS)
    edges = [
        e for e in api.get("/v1/wiring").json()["edges"]
        if e["kind"] == "handoff" and (e["from"], e["to"]) == ("ans-code", "ans-test")
    ]  # fmt: skip
    assert len(edges) == 1 and edges[0]["via"] == "ans-handoffs/CODE, contract"
    text = api.get("/v1/wiring", params={"format": "mermaid"}).text
    arrows = [line for line in text.splitlines() if "n_ans_code -.->" in line]
    assert arrows == ['  n_ans_code -.->|"handoff: implemented_code"| n_ans_test']
    assert len(text.splitlines()) == len(set(text.splitlines()))  # no line twice


APPROVAL = """
cuelist: ans-approval
cues:
  - {id: BUILD, target_agents: [ans-code], action: {result: {passed: 42}}}
  - id: SHIP
    target_agents: [ans-test]
    depends_on: [BUILD]
    conditions: [approval_received]
"""


def test_results_per_target_and_a_run_holding_for_its_approval(api: httpx.Client) -> None:
    submit(api, APPROVAL)
    run_id = start(api, "ans-approval")
    run = when(api, run_id, lambda r: r["status"] == "holding", "the run holding")
    assert run["hold_reason"] == "condition approval_received"
    assert run["cues"]["BUILD"]["result"] == {"ans-code": {"passed": 42}}
    assert run["cues"]["SHIP"]["result"] == {}
    r = api.post(f"/v1/runs/{run_id}/conditions/approval_received")
    assert r.status_code == 200, r.text
    done = wait_done(api, run_id)
    assert done["status"] == "success" and done["hold_reason"] is None
    events = api.get(f"/v1/runs/{run_id}/events")  # the stream ends: the run is over
    assert '"status": "holding", "reason": "condition approval_received"' in events.text


def test_a_condition_no_cue_waits_for_is_a_422_with_a_did_you_mean(api: httpx.Client) -> None:
    submit(api, APPROVAL)
    run_id = start(api, "ans-approval")
    when(api, run_id, lambda r: r["status"] == "holding", "the run holding")
    r = api.post(f"/v1/runs/{run_id}/conditions/aproval_recieved")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["conditions"] == ["approval_received"]
    assert body["did_you_mean"] == "approval_received"
    assert body["detail"] == (
        f"no cue of run {run_id} waits for condition 'aproval_recieved'; it waits for "
        "approval_received (did you mean approval_received?)"
    )
    r = api.post(f"/v1/runs/{run_id}/conditions/launch_codes")
    assert r.status_code == 422 and r.json()["did_you_mean"] is None
    assert "did you mean" not in r.json()["detail"]
    run = run_of(api, run_id)
    assert run["conditions"] == [] and run["status"] == "holding"  # nothing was raised
    assert api.post(f"/v1/runs/{run_id}/conditions/approval_received").status_code == 200
    assert wait_done(api, run_id)["status"] == "success"


DOOMED = """
cuelist: ans-doomed
description: {note}
schedule: "0 3 * * *"
cues:
  - {{id: ONLY, target_agents: [ans-code], action: {{execute_ms: {ms}}}}}
"""


def test_delete_a_version_then_the_cuelist_while_a_run_keeps_its_own(api: httpx.Client) -> None:
    old = submit(api, DOOMED.format(note="old", ms=1500))
    new = submit(api, DOOMED.format(note="new", ms=10))
    running = start(api, "ans-doomed", version=old)
    r = api.delete("/v1/cuelists/ans-doomed", params={"version": old})
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "ans-doomed", "deleted": [old]}
    listed = api.get("/v1/cuelists/ans-doomed").json()
    assert [v["version"] for v in listed["versions"]] == [new]
    r = api.post("/v1/runs", json={"cuelist": "ans-doomed", "version": old})
    assert r.status_code == 404 and old in r.json()["detail"]  # refused: deleted
    assert api.delete("/v1/cuelists/ans-doomed", params={"version": old}).status_code == 404
    r = api.delete("/v1/cuelists/ans-doomed")  # every version left
    assert r.status_code == 200 and r.json()["deleted"] == [new]
    assert api.get("/v1/cuelists/ans-doomed").status_code == 404
    assert "ans-doomed" not in [c["name"] for c in api.get("/v1/cuelists").json()["data"]]
    r = api.post("/v1/runs", json={"cuelist": "ans-doomed"})
    assert r.status_code == 404 and "no cuelist named ans-doomed" in r.json()["detail"]
    assert api.delete("/v1/cuelists/ans-doomed").status_code == 404
    done = wait_done(api, running)  # the run pinned to the deleted version goes on
    assert done["status"] == "success" and done["version"] == old


def test_pause_and_resume_a_schedule(api: httpx.Client) -> None:
    submit(api, DOOMED.replace("ans-doomed", "ans-nightly").format(note="n", ms=10))
    r = api.post("/v1/cuelists/ans-nightly/schedule/pause")
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "ans-nightly", "schedule": "0 3 * * *", "paused": True}
    r = api.post("/v1/cuelists/ans-nightly/schedule/resume")
    assert r.json() == {"name": "ans-nightly", "schedule": "0 3 * * *", "paused": False}
    r = api.post("/v1/cuelists/no-such-cuelist/schedule/pause")
    assert r.status_code == 404 and r.json()["detail"] == "no cuelist named no-such-cuelist"


FLAKY = """
cuelist: ans-flaky
cues:
  - {id: BUILD, target_agents: [ans-code], action: {fail: once}}
  - {id: TEST, target_agents: [ans-test], depends_on: [BUILD]}
"""
HALF = """
cuelist: ans-half
cues:
  - id: CODE
    target_agents: [ans-code]
    action: {context: {build_id: b-7}, result: {lines: 120}}
  - {id: TEST, target_agents: [ans-test], depends_on: [CODE], action: {fail: true}}
"""


def test_a_run_whose_cuelist_was_deleted_is_not_retried(api: httpx.Client) -> None:
    """A run that ended holds no version: a retry reopened it on the leader's cached plan
    after its cuelist was deleted, and no hub after that leader could load the run."""
    submit(api, FLAKY.replace("ans-flaky", "ans-doomed"))
    run_id = start(api, "ans-doomed")
    assert wait_done(api, run_id)["status"] == "failed"
    assert api.delete("/v1/cuelists/ans-doomed").status_code == 200
    r = api.post(f"/v1/runs/{run_id}/cues/BUILD/retry")
    assert r.status_code == 404 and "was deleted" in r.json()["detail"], r.text
    assert api.get(f"/v1/runs/{run_id}").json()["status"] == "failed"


def test_retry_a_blocked_cue_of_a_failed_run_then_rerun_it(api: httpx.Client) -> None:
    submit(api, FLAKY)
    run_id = start(api, "ans-flaky")
    failed = wait_done(api, run_id)
    assert failed["status"] == "failed"
    assert failed["cues"]["TEST"]["state"] == "blocked"
    r = api.post(f"/v1/runs/{run_id}/cues/TEST/retry")  # blocked: its failure is retried
    assert r.status_code == 200, r.text
    attempt = failed["cues"]["TEST"]["attempt"]  # 1 if it was warned early, else 0
    assert r.json() == {
        "run_id": run_id, "cue": "TEST", "state": "waiting", "attempt": attempt,
        "retried": "BUILD",
    }  # fmt: skip
    done = wait_done(api, run_id)
    assert done["status"] == "success", done
    assert done["cues"]["BUILD"]["attempt"] == 2 and done["cues"]["BUILD"]["fired_by"] == "operator"
    stream = api.get(f"/v1/runs/{run_id}/events").text  # not ended by its first ending
    ends = [line for line in stream.splitlines() if '"type": "run"' in line]
    assert [e.split('"status": ')[1].split(",")[0].strip('}"') for e in ends] == [
        "running", "failed", "running", "success"
    ]  # fmt: skip
    r = api.post(f"/v1/runs/{run_id}/cues/BUILD/retry")
    assert r.status_code == 409
    assert r.json()["detail"] == "cue BUILD is not failed or blocked: it is completed"
    assert api.post(f"/v1/runs/{run_id}/cues/NOPE/retry").status_code == 404
    assert api.post("/v1/runs/0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b/cues/A/retry").status_code == 404

    r = api.post(f"/v1/runs/{run_id}/rerun")  # no body: from the start
    assert r.status_code == 201, r.text
    again = r.json()["run_id"]
    assert r.json() == {"run_id": again, "rerun_of": run_id}
    rerun = wait_done(api, again)
    assert rerun["rerun_of"] == run_id and rerun["version"] == done["version"]
    assert rerun["status"] == "failed"  # `fail: once` fails each run's first attempt
    assert run_of(api, run_id)["reruns"] == [again]
    listed = api.get("/v1/runs", params={"cuelist": "ans-flaky"}).json()["data"]
    assert {r["run_id"]: r["rerun_of"] for r in listed} == {run_id: None, again: run_id}


def test_rerun_from_failure_skips_what_completed(api: httpx.Client) -> None:
    submit(api, HALF)
    run_id = start(api, "ans-half")
    first = wait_done(api, run_id)
    assert first["status"] == "partial"
    r = api.post(f"/v1/runs/{run_id}/rerun", json={"from_failure": True})
    assert r.status_code == 201, r.text
    second = wait_done(api, r.json()["run_id"])
    code = second["cues"]["CODE"]
    assert code["state"] == "completed" and code["reason"] == f"completed in run {run_id}"
    assert code["result"] == {"ans-code": {"lines": 120}}
    assert code["go_at"] == first["cues"]["CODE"]["go_at"]  # not called again
    assert second["cues"]["TEST"]["state"] == "failed"  # called again (and it fails again)
    assert second["record"]["fired"] == ["CODE", "TEST"]
    context = api.get(f"/v1/runs/{second['run_id']}/context").json()["entries"]
    assert context["build_id"]["value"] == "b-7" and context["build_id"]["source"] == "ans-code"
    dry = start(api, "ans-half", dry=True)
    r = api.post(f"/v1/runs/{dry}/rerun")
    assert r.status_code == 409 and "dry run" in r.json()["detail"]


def test_a_run_whose_state_expired_cannot_be_retried_or_rerun(
    api: httpx.Client, stack: dict[str, Any]
) -> None:
    submit(api, FLAKY)
    run_id = start(api, "ans-flaky")
    assert wait_done(api, run_id)["status"] == "failed"
    keys = Keys(stack["env"]["CALLBOARD_PREFIX"])
    with redis.Redis.from_url(stack["env"]["REDIS_URL"]) as client:  # as retention does
        client.delete(keys.run(run_id), keys.run_events(run_id), keys.run_context(run_id))
    r = api.post(f"/v1/runs/{run_id}/cues/BUILD/retry")
    assert r.status_code == 404 and r.json()["detail"] == f"no run {run_id}"
    assert api.post(f"/v1/runs/{run_id}/rerun").status_code == 404


GHOST = """
cuelist: ans-ghost
cues:
  - {id: CALL, target_agents: [ans-ghost], ack_timeout_s: 1}
"""


def test_an_escalation_of_a_run_that_ended_can_still_be_resolved(api: httpx.Client) -> None:
    """Its agent never answers: the timeout's escalation stays open in the operator's queue
    after the run failed (and the engine forgot the run); resolving it closes it."""
    submit(api, GHOST)
    run_id = start(api, "ans-ghost")
    assert wait_done(api, run_id)["status"] == "failed"
    listed = api.get("/v1/escalations", params={"run_id": run_id, "status": "open"}).json()
    (esc,) = listed["data"]
    assert esc["type"] == "escalation.timeout" and esc["cue_id"] == "CALL"
    r = api.post(f"/v1/escalations/{esc['id']}/resolve", json={"note": "agent retired"})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "resolved"
    resolution = r.json()["resolution"]
    assert resolution["note"] == "agent retired"
    assert resolution["effect"] == f"none: run {run_id} had ended"
    assert api.get("/v1/escalations", params={"run_id": run_id, "status": "open"}).json() == {
        "data": [], "count": 0,
    }  # fmt: skip
    again = api.post(f"/v1/escalations/{esc['id']}/resolve")
    assert again.status_code == 409 and "already resolved" in again.json()["detail"]
