"""The official `a2a-sdk` client drives callboard's own A2A endpoint (a real hub process, echo
specialists as processes): the card's skills are the cuelists; a message starts a run once
per message id; the run's events stream as task updates; an approval and a manual GO are
INPUT_REQUIRED and the client's reply gives them; cancel; and a task outlives its hub."""

from __future__ import annotations

import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers import new_data_part, new_text_part
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, InvalidParamsError, TaskNotCancelableError, TaskNotFoundError

from callboard.embedded import EmbeddedServer, free_port
from tests.e2e.procs import Procs, child_env, processes, wait_online

pytestmark = pytest.mark.redis
KEY = "a2a-in-key-0123456789"
APPROVAL = {
    "cuelist": "approve-deploy",
    "description": "Build, wait for an approval, deploy",
    "cues": [
        {"id": "BUILD", "target_agents": ["worker"], "action": {"context": {"built": "yes"}}},
        {"id": "DEPLOY", "target_agents": ["worker"], "depends_on": ["BUILD"],
         "conditions": ["approval_received"]},
    ],
}  # fmt: skip
MANUAL = {
    "cuelist": "manual-release",
    "cues": [
        {"id": "PREP", "target_agents": ["worker"], "auto_follow": "CHECK"},
        {"id": "CHECK", "target_agents": ["worker"]},
        {"id": "RELEASE", "target_agents": ["worker"], "depends_on": ["CHECK"], "manual": True},
    ],
}

CONTRACT = """
description: builds the app
requires: [task_description, repo_url]
provides: [implemented_code, build_log]
handoff_to: [worker]
"""


@dataclass
class Hub:
    url: str
    port: int
    procs: Procs


@pytest.fixture(scope="module")
def hub(redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    env = child_env(redis_server, CALLBOARD_API_KEY=KEY)
    with processes(env, tmp_path_factory.mktemp("a2a-in")) as procs:
        port = free_port()
        url = procs.hub(port)
        procs.echo("worker")
        contract = procs.log_dir / "builder.yaml"
        contract.write_text(CONTRACT)
        argv = [sys.executable, "-m", "callboard.specialist_cmd", "echo", "--agent", "builder",
                "--contract", str(contract)]  # fmt: skip
        procs.spawn("echo-builder", argv)
        headers = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
            wait_online(api, ["worker", "builder"])
            for doc in (APPROVAL, MANUAL):
                assert api.post("/v1/cuelists", json=doc).status_code == 201
        yield Hub(url, port, procs)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        yield c


async def _client(
    hub: Hub, http: httpx.AsyncClient, binding: str, streaming: bool = True
) -> tuple[AgentCard, Client]:
    card = await A2ACardResolver(http, hub.url).get_agent_card()
    config = ClientConfig(httpx_client=http, streaming=streaming,
                          supported_protocol_bindings=[binding])  # fmt: skip
    return card, ClientFactory(config).create(card)


def _message(*parts: Part, task_id: str = "", **metadata: Any) -> Message:
    return Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=task_id, parts=list(parts),
        metadata=metadata,
    )  # fmt: skip


async def _events(client: Client, message: Message, **config: Any) -> list[StreamResponse]:
    request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(**config))
    return [event async for event in client.send_message(request)]


def _task_id(events: list[StreamResponse]) -> str:
    first = events[0]
    return first.task.id if first.HasField("task") else first.status_update.task_id


def _last_state(events: list[StreamResponse]) -> TaskState:
    last = events[-1]
    return last.task.status.state if last.HasField("task") else last.status_update.status.state


async def test_the_card_lists_cuelists_as_skills_and_needs_the_key(
    hub: Hub, http: httpx.AsyncClient
) -> None:
    card, _ = await _client(hub, http, "HTTP+JSON")
    assert card.name == "callboard"
    assert {"approve-deploy", "manual-release"} <= {s.id for s in card.skills}
    skill = next(s for s in card.skills if s.id == "approve-deploy")
    assert skill.description == "Build, wait for an approval, deploy"
    bindings = {i.protocol_binding: i.url for i in card.supported_interfaces}
    assert bindings == {"HTTP+JSON": f"{hub.url}/a2a", "JSONRPC": f"{hub.url}/a2a/jsonrpc"}
    assert card.capabilities.streaming and "bearer" in card.security_schemes
    async with httpx.AsyncClient() as anonymous:
        r = await anonymous.get(f"{hub.url}/.well-known/agent-card.json")
        assert r.status_code == 401 and "detail" in r.json()
        r = await anonymous.post(f"{hub.url}/a2a/message:send", json={})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


async def test_a_run_with_an_approval_streams_asks_and_completes_on_the_reply(
    hub: Hub, http: httpx.AsyncClient
) -> None:
    _, client = await _client(hub, http, "HTTP+JSON")
    first = _message(new_text_part("deploy it"), skill="approve-deploy")
    events = await _events(client, first)
    run_id = _task_id(events)
    assert events[0].task.status.state in (TaskState.TASK_STATE_WORKING,
                                           TaskState.TASK_STATE_INPUT_REQUIRED)  # fmt: skip
    said = [e.status_update.status.message.parts[0].text for e in events[1:]]
    assert any(s.startswith("BUILD GO") for s in said), said  # run events as updates
    assert _last_state(events) == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "waits for condition approval_received" in said[-1]
    task = await client.get_task(GetTaskRequest(id=run_id))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.context_id == run_id  # no context id given: the run's id
    # the same message again starts nothing new
    again = await _events(client, first, return_immediately=True)
    assert _task_id(again) == run_id
    # an unclear reply is refused, saying what the run waits for
    with pytest.raises(A2AError, match="approval_received"):
        await _events(client, _message(new_text_part("hmm"), task_id=run_id))
    reply = _message(new_data_part({"condition": "approval_received"}), task_id=run_id)
    done = await _events(client, reply)
    assert _last_state(done) == TaskState.TASK_STATE_COMPLETED
    artifacts = {e.artifact_update.artifact.name for e in done if e.HasField("artifact_update")}
    assert artifacts == {"results", "context"}
    final = await client.get_task(GetTaskRequest(id=run_id))
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert dict(final.metadata)["status"] == "success"
    context = next(a for a in final.artifacts if a.name == "context")
    assert dict(context.parts[0].data.struct_value)["built"] == "yes"
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as api:
        run = (await api.get(f"{hub.url}/v1/runs/{run_id}")).json()
    assert run["status"] == "success" and run["conditions"] == ["approval_received"]


async def test_a_manual_go_over_json_rpc_without_streaming(
    hub: Hub, http: httpx.AsyncClient
) -> None:
    _, client = await _client(hub, http, "JSONRPC", streaming=False)
    start = _message(new_data_part({"cuelist": "manual-release", "params": {"ticket": 7}}))
    start.context_id = "ctx-release-7"
    [answer] = await _events(client, start)  # message:send waits until the run settles
    task = answer.task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.context_id == "ctx-release-7"
    assert "cue RELEASE is armed" in task.status.message.parts[0].text
    [after] = await _events(client, _message(new_text_part("approve"), task_id=task.id))
    assert after.task.status.state == TaskState.TASK_STATE_COMPLETED
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}) as api:
        run = (await api.get(f"{hub.url}/v1/runs/{task.id}")).json()
    assert run["cues"]["RELEASE"]["fired_by"] == "operator"  # the reply fired the GO
    assert run["params"]["ticket"] == 7 and run["status"] == "success"


async def test_cancel_and_bad_requests(hub: Hub, http: httpx.AsyncClient) -> None:
    _, client = await _client(hub, http, "HTTP+JSON")
    events = await _events(client, _message(new_text_part("go"), skill="approve-deploy"))
    run_id = _task_id(events)
    cancelled = await client.cancel_task(CancelTaskRequest(id=run_id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=run_id))
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id="no-such-run"))
    with pytest.raises(InvalidParamsError, match="name the cuelist"):
        await _events(client, _message(new_text_part("do something")))
    with pytest.raises(InvalidParamsError, match="no cuelist named nope"):
        await _events(client, _message(new_text_part("x"), skill="nope"))


async def test_a_task_outlives_its_hub(hub: Hub, http: httpx.AsyncClient) -> None:
    _, client = await _client(hub, http, "HTTP+JSON")
    events = await _events(client, _message(new_text_part("deploy"), skill="approve-deploy"))
    run_id = _task_id(events)
    assert _last_state(events) == TaskState.TASK_STATE_INPUT_REQUIRED
    [proc] = [p for p in hub.procs.procs if f"{hub.port}" in " ".join(map(str, p.args))]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    with pytest.raises(A2AError):
        await client.get_task(GetTaskRequest(id=run_id))  # nobody answers meanwhile
    hub.procs.hub(hub.port)  # a new hub process, same Redis, same address
    task: Task = await client.get_task(GetTaskRequest(id=run_id))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "approval_received" in task.status.message.parts[0].text
    reply = _message(new_text_part("approval_received"), task_id=run_id)
    done = await _events(client, reply)
    assert _last_state(done) == TaskState.TASK_STATE_COMPLETED
    with pytest.raises(A2AError, match="ended"):
        async for _ in client.subscribe(SubscribeToTaskRequest(id=run_id)):
            pass


def test_a_registered_contract_exported_as_an_agent_card(hub: Hub) -> None:
    with httpx.Client(base_url=hub.url, headers={"Authorization": f"Bearer {KEY}"}) as api:
        r = api.get("/v1/agents/builder/card")
        assert r.status_code == 200, r.text
        card = r.json()
        assert api.get("/v1/agents/nobody/card").status_code == 404
    assert httpx.get(f"{hub.url}/v1/agents/builder/card").status_code == 401
    assert (card["name"], card["description"]) == ("builder", "builds the app")
    skills = {s["id"]: s for s in card["skills"]}
    assert set(skills) == {"implemented_code", "build_log"}
    tags = skills["implemented_code"]["tags"]
    assert tags == ["provides", "requires:task_description", "requires:repo_url"]
    [extension] = card["capabilities"]["extensions"]
    assert extension["uri"] == "urn:callboard:contract:v1"
    assert extension["params"]["requires"] == ["task_description", "repo_url"]
    assert extension["params"]["handoff_to"] == ["worker"]
    # the SDK reads it as a card
    from a2a.client.card_resolver import parse_agent_card

    parsed = parse_agent_card(card)
    assert [s.id for s in parsed.skills] == ["implemented_code", "build_log"]


async def test_a_task_whose_cuelist_was_deleted_is_still_read_and_listed(
    hub: Hub, http: httpx.AsyncClient
) -> None:
    """GetTask and every ListTasks page holding such a task answered -32603 / HTTP 500 (the
    cuelist version was read to build the task); it is built from the run's record now."""
    doomed = {"cuelist": "doomed", "cues": [{"id": "A", "target_agents": ["worker"]}]}
    async with httpx.AsyncClient(base_url=hub.url, headers=http.headers) as api:
        assert (await api.post("/v1/cuelists", json=doomed)).status_code == 201
        _, client = await _client(hub, http, "JSONRPC", streaming=False)
        [answer] = await _events(client, _message(new_text_part("x"), skill="doomed"))
        assert answer.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert (await api.delete("/v1/cuelists/doomed")).status_code in (200, 204)
    for binding in ("JSONRPC", "HTTP+JSON"):
        _, client = await _client(hub, http, binding)
        task = await client.get_task(GetTaskRequest(id=answer.task.id))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        listed = await client.list_tasks(ListTasksRequest())
        assert answer.task.id in {t.id for t in listed.tasks}


async def test_bad_params_are_invalid_params_not_internal_errors(
    hub: Hub, http: httpx.AsyncClient
) -> None:
    """A skill over 200 characters failed the run request's model: -32603 and a traceback in
    the hub's log. A `dry` of "false" started a dry run; a param 3 arrived as 3.0."""
    for binding in ("JSONRPC", "HTTP+JSON"):
        _, client = await _client(hub, http, binding, streaming=False)
        with pytest.raises(InvalidParamsError, match="200 characters"):
            await _events(client, _message(new_text_part("x"), skill="s" * 300))
        spec = {"cuelist": "manual-release", "dry": "false"}
        with pytest.raises(InvalidParamsError, match="dry"):
            await _events(client, _message(new_data_part(spec)), return_immediately=True)
    assert "Traceback" not in hub.procs.log(f"hub-{hub.port}")
    start = _message(new_data_part({"cuelist": "manual-release", "params": {"n": 3, "x": 2.5}}))
    [answer] = await _events(client, start, return_immediately=True)
    async with httpx.AsyncClient(headers=http.headers) as api:
        run = (await api.get(f"{hub.url}/v1/runs/{answer.task.id}")).json()
    assert run["dry"] is False
    assert run["params"]["n"] == 3 and isinstance(run["params"]["n"], int)
    assert run["params"]["x"] == 2.5


async def test_a_refused_reply_gives_nothing(hub: Hub, http: httpx.AsyncClient) -> None:
    """A reply raising a condition and firing a cue that does not exist was refused after
    the condition was raised; every action is checked before any is sent now."""
    _, client = await _client(hub, http, "HTTP+JSON")
    events = await _events(client, _message(new_text_part("deploy"), skill="approve-deploy"))
    run_id = _task_id(events)
    assert _last_state(events) == TaskState.TASK_STATE_INPUT_REQUIRED
    both = new_data_part({"condition": "approval_received", "go": "NOPE"})
    with pytest.raises(InvalidParamsError, match="no cue NOPE"):
        await _events(client, _message(both, task_id=run_id), return_immediately=True)
    async with httpx.AsyncClient(headers=http.headers) as api:
        run = (await api.get(f"{hub.url}/v1/runs/{run_id}")).json()
    assert run["conditions"] == []
    await client.cancel_task(CancelTaskRequest(id=run_id))
