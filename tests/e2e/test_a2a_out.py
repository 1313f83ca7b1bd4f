"""The `a2a` specialist drives a real A2A agent (the official SDK's server, examples/a2a_agent.py)
through cuelists: artifacts into the context, an unknown skill or a refused token not ready,
INPUT_REQUIRED answered by an operator, cancel, failure, and a redelivered GO that follows
the task it started instead of sending it again. Hub, specialists and agents are processes."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer, free_port
from protocols.codec import decode
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType as T
from tests.e2e.procs import ROOT, Procs, child_env, processes, wait_done, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
TOKEN = "agent-token-0123456789"


@dataclass
class World:
    api: httpx.Client
    procs: Procs
    streaming: str  # base URL of the streaming agent (needs TOKEN)
    polling: str  # base URL of the agent that does not stream
    env: dict[str, str]  # REDIS_URL and CALLBOARD_PREFIX of the hub

    def agent_log(self, url: str) -> dict[str, list[dict[str, Any]]]:
        log: dict[str, list[dict[str, Any]]] = httpx.get(f"{url}/log", timeout=5).json()
        return log

    def gos(self, agent: str, run_id: str) -> list[str]:
        """The message ids of the GOs the hub put in `agent`'s inbox for `run_id`."""
        inbox = Keys(self.env["CALLBOARD_PREFIX"]).inbox(agent)
        with redis.Redis.from_url(self.env["REDIS_URL"]) as client:
            rows = client.xrange(inbox)
        found = [decode(fields[STREAM_FIELD.encode()]) for _, fields in rows]
        return [m.message_id for m in found if m.message_type is T.COORD_GO and m.run_id == run_id]

    def a2a(self, agent: str, *args: str, **env: str) -> None:
        argv = [sys.executable, "-m", "callboard.specialist_cmd", "a2a", "--agent", agent, *args]
        self.procs.spawn(f"a2a-{agent}-{len(self.procs.procs)}", argv, **env)

    def run(self, doc: dict[str, Any]) -> str:
        r = self.api.post("/v1/cuelists", json=doc)
        assert r.status_code == 201, r.text
        r = self.api.post("/v1/runs", json={"cuelist": doc["cuelist"]})
        assert r.status_code == 201, r.text
        run_id: str = r.json()["run_id"]
        return run_id

    def cue(self, run_id: str, cue_id: str) -> dict[str, Any]:
        cue: dict[str, Any] = self.api.get(f"/v1/runs/{run_id}").json()["cues"][cue_id]
        return cue


def _agent(procs: Procs, *args: str) -> str:
    port = free_port()
    argv = [sys.executable, str(ROOT / "examples" / "a2a_agent.py"), "--port", str(port), *args]
    procs.spawn(f"agent-{port}", argv)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/.well-known/agent-card.json", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    eventually_sync(up, 30, interval_s=0.05, message=f"A2A agent on {port}")
    return url


@pytest.fixture(scope="module")
def world(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    env = child_env(redis_server, CALLBOARD_A2A_POLL_S="0.2")
    with processes(env, tmp_path_factory.mktemp("a2a-out")) as procs:
        hub = procs.hub()
        streaming = _agent(procs, "--token", TOKEN)
        polling = _agent(procs, "--no-streaming")
        with httpx.Client(base_url=hub, timeout=30) as api:
            w = World(api, procs, streaming, polling, env)
            w.a2a("remote-stream", "--url", streaming, CALLBOARD_A2A_TOKEN=TOKEN)
            w.a2a("remote-poll")  # serves any agent its cues name in action.url
            w.a2a("remote-badtoken", "--url", streaming, CALLBOARD_A2A_TOKEN="wrong")
            wait_online(api, ["remote-stream", "remote-poll", "remote-badtoken"])
            yield w


def _cuelist(name: str, *cues: dict[str, Any]) -> dict[str, Any]:
    return {"cuelist": name, "defaults": {"standby_timeout_s": 3}, "cues": list(cues)}


def test_completed_tasks_write_their_artifacts_to_the_context(world: World) -> None:
    doc = _cuelist(
        "a2a-summaries",
        {"id": "STREAM", "target_agents": ["remote-stream"], "auto_follow": "POLL",
         "action": {"skill": "summarize", "text": "hello brave world"}},
        {"id": "POLL", "description": "summarize the release notes",
         "target_agents": ["remote-poll"],
         "action": {"url": world.polling, "skill": "summarize"}},
    )  # fmt: skip
    run_id = world.run(doc)
    run = wait_done(world.api, run_id)
    assert run["status"] == "success", run
    entries = world.api.get(f"/v1/runs/{run_id}/context").json()["entries"]
    assert entries["STREAM.summary"]["value"] == "HELLO BRAVE WORLD"
    assert entries["STREAM.stats"]["value"] == {"words": 3, "chars": 17}
    assert entries["STREAM.summary"]["source"] == "remote-stream"
    assert entries["STREAM.summary"]["tags"] == ["a2a"]
    assert entries["POLL.summary"]["value"] == "SUMMARIZE THE RELEASE NOTES"  # the description
    result = run["cues"]["STREAM"]
    assert result["state"] == "completed"
    for url, cue, agent in ((world.streaming, "STREAM", "remote-stream"),
                            (world.polling, "POLL", "remote-poll")):  # fmt: skip
        sent = [m for m in world.agent_log(url)["messages"] if m["context_id"] == run_id]
        assert len(sent) == 1, (cue, sent)  # one message per GO, in the run's context
        assert sent[0]["skill"] == "summarize"
        assert [sent[0]["message_id"]] == world.gos(agent, run_id)  # the GO's own id


def test_unknown_skill_or_refused_token_is_not_ready(world: World) -> None:
    doc = _cuelist(
        "a2a-not-ready",
        {"id": "NOSKILL", "target_agents": ["remote-stream"], "action": {"skill": "juggle"}},
        {"id": "BADTOKEN", "target_agents": ["remote-badtoken"], "action": {"skill": "summarize"}},
    )
    doc["start"] = ["NOSKILL", "BADTOKEN"]
    run_id = world.run(doc)
    seen: dict[str, str] = {}

    def reasons() -> bool:
        for cue_id in ("NOSKILL", "BADTOKEN"):
            reason = world.cue(run_id, cue_id)["reason"] or ""
            if "not ready" in reason:
                seen[cue_id] = reason
        return len(seen) == 2

    eventually_sync(reasons, 20, interval_s=0.05, message=f"both cues not ready ({seen})")
    assert "has no skill 'juggle'" in seen["NOSKILL"]
    assert "summarize" in seen["NOSKILL"]  # what the agent does have
    assert "refused our credentials" in seen["BADTOKEN"]
    assert TOKEN not in str(seen) and "wrong" not in seen["BADTOKEN"]
    run = wait_done(world.api, run_id)
    assert run["status"] == "failed"  # standby timed out: nothing was sent
    assert not [
        m for m in world.agent_log(world.streaming)["messages"] if m["context_id"] == run_id
    ]


def test_input_required_is_answered_by_an_operator(world: World) -> None:
    doc = _cuelist(
        "a2a-ask", {"id": "ASK", "target_agents": ["remote-stream"], "action": {"skill": "ask"}}
    )
    run_id = world.run(doc)

    def question() -> dict[str, Any] | None:
        escs = world.api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
        asks = [e for e in escs if e["payload"].get("cause", "").startswith("input_required:")]
        return asks[0] if asks else None

    esc = eventually_sync(question, 20, interval_s=0.1, message="the agent's question")
    assert esc["detail"] == "Which colour?" and esc["raised_by"] == "remote-stream"
    cue = world.cue(run_id, "ASK")
    assert cue["state"] == "go" and "Which colour?" in (cue["reason"] or "")
    r = world.api.post(f"/v1/escalations/{esc['id']}/resolve", json={"answer": "teal"})
    assert r.status_code == 200, r.text
    run = wait_done(world.api, run_id)
    assert run["status"] == "success", run
    entries = world.api.get(f"/v1/runs/{run_id}/context").json()["entries"]
    assert entries["ASK.answer"]["value"] == "the colour is teal"
    sent = [m for m in world.agent_log(world.streaming)["messages"] if m["context_id"] == run_id]
    assert [m["text"] for m in sent] == ["ASK", "teal"]  # no description: the cue id
    assert sent[1]["task_id"] == sent[0]["task_id"]  # the answer went to the same task


def test_cancelling_the_run_cancels_the_remote_task(world: World) -> None:
    doc = _cuelist(
        "a2a-cancel",
        {"id": "SLOW", "target_agents": ["remote-stream"],
         "action": {"skill": "slow", "data": {"seconds": 120}}},
    )  # fmt: skip
    run_id = world.run(doc)

    def task_id() -> str | None:
        sent = [
            m for m in world.agent_log(world.streaming)["messages"] if m["context_id"] == run_id
        ]
        return sent[0]["task_id"] if sent else None

    remote_task = eventually_sync(task_id, 20, interval_s=0.1, message="the slow task started")
    assert world.api.post(f"/v1/runs/{run_id}/cancel").status_code == 200

    def cancelled() -> bool:
        return any(
            c["task_id"] == remote_task for c in world.agent_log(world.streaming)["cancelled"]
        )

    eventually_sync(cancelled, 20, interval_s=0.1, message="the remote task cancelled")
    assert wait_done(world.api, run_id)["status"] == "cancelled"


def test_a_failed_remote_task_fails_the_cue(world: World) -> None:
    doc = _cuelist(
        "a2a-fail",
        {"id": "FAIL", "target_agents": ["remote-poll"],
         "action": {"url": world.polling, "skill": "fail"}},
    )  # fmt: skip
    run = wait_done(world.api, world.run(doc))
    assert run["status"] == "failed"
    error = run["cues"]["FAIL"]["error"]
    assert "failed: the disk is full" in error and "remote-poll" in error


def test_a_redelivered_go_follows_the_task_instead_of_sending_again(world: World) -> None:
    """kill -9 the replica while the remote task works; another replica reclaims the GO,
    finds the task by its done-marker and completes the cue when the task completes."""
    fast = {"CALLBOARD_MIN_IDLE_MS": "1500", "CALLBOARD_A2A_TOKEN": TOKEN}
    world.a2a("remote-crashy", "--url", world.streaming, "--replica", "first", **fast)
    wait_online(world.api, ["remote-crashy"])
    first = world.procs.procs[-1]
    doc = _cuelist(
        "a2a-redelivery",
        {"id": "LONG", "target_agents": ["remote-crashy"],
         "action": {"skill": "slow", "data": {"seconds": 6}}},
    )  # fmt: skip
    run_id = world.run(doc)

    def sent() -> list[dict[str, Any]]:
        log = world.agent_log(world.streaming)["messages"]
        return [m for m in log if m["context_id"] == run_id]

    eventually_sync(sent, 20, interval_s=0.05, message="the task started")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    world.a2a("remote-crashy", "--url", world.streaming, "--replica", "second", **fast)
    run = wait_done(world.api, run_id, timeout_s=60)
    assert run["status"] == "success", run
    assert len(sent()) == 1  # followed again, never sent twice
    assert run["cues"]["LONG"]["attempt"] == 1


def test_the_shipped_example_runs_with_a_replica_bound_by_url(world: World) -> None:
    """cuelists/interop/a2a-summarize.yaml as shipped: its agent served by --url."""
    world.a2a("a2a-summarizer", "--url", world.streaming, CALLBOARD_A2A_TOKEN=TOKEN)
    wait_online(world.api, ["a2a-summarizer"])
    path = ROOT / "cuelists" / "interop" / "a2a-summarize.yaml"
    r = world.api.post(
        "/v1/cuelists", content=path.read_bytes(), headers={"Content-Type": "application/yaml"}
    )
    assert r.status_code == 201, r.text
    run_id = world.api.post("/v1/runs", json={"cuelist": "a2a-summarize"}).json()["run_id"]

    def question() -> str | None:
        escs = world.api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
        return next((e["id"] for e in escs if e["status"] == "open"), None)

    esc = eventually_sync(question, 20, interval_s=0.1, message="the agent's question")
    world.api.post(f"/v1/escalations/{esc}/resolve", json={"answer": "green"})
    run = wait_done(world.api, run_id)
    assert run["status"] == "success", run
    entries = world.api.get(f"/v1/runs/{run_id}/context").json()["entries"]
    assert entries["SUMMARIZE.summary"]["value"] == "SUMMARIZE THE RELEASE NOTES FOR VERSION 2.0"
    assert entries["ASK.answer"]["value"] == "the colour is green"


def test_the_token_is_never_logged(world: World) -> None:
    """Every process log of this module (specialists at INFO, the agents, the hub)."""
    logs = sorted(world.procs.log_dir.glob("*.log"))
    assert any(p.name.startswith("a2a-remote-stream") for p in logs)
    assert [p.name for p in logs if TOKEN in p.read_text(errors="replace")] == []
