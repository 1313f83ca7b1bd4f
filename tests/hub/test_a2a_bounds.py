"""What one A2A request may cost the hub: tasks/list of big runs never holds the event
loop (the engine's, and its lease renewals), and a reply gives each thing it names once and
at most MAX_ACTIONS of them, however it is written. The official SDK's client, over
JSON-RPC, against the API of a hub in front of a real leading hub, on a real server."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers import new_text_part
from a2a.types import (
    ListTasksRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError

from hub.a2a.handler import LIST_CUES_MAX
from hub.a2a.replies import MAX_ACTIONS, actions
from hub.a2a.tasks import Need
from hub.api.routes.runs import create_run
from hub.api.schemas import RunCreate
from hub.service import Hub
from protocols.canonical import canonical_json
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.settings import Settings
from protocols.states import RunStatus
from protocols.validation import load_cuelist
from tests.helpers import eventually
from tests.hub.running import api_process

BIG_CUES = 2_000  # a run whose task takes tens of ms to read and build
BIG_RUNS = 30  # a page of them: over two seconds of CPU, all on the loop before
# the longest the loop may go without running (the lease is 2 s here): with the page built
# off it, what remains is Python's collection of the garbage the page makes (0.1-0.35 s)
MAX_GAP_S = 1.2
GATES = MAX_ACTIONS + 1  # armed cues: one more than a reply may name
AGENT = "bounds-nobody"  # never online


async def _client(api: httpx.AsyncClient) -> Client:
    card = await A2ACardResolver(api, "http://127.0.0.1").get_agent_card()
    config = ClientConfig(
        httpx_client=api, streaming=False, supported_protocol_bindings=["JSONRPC"]
    )
    return ClientFactory(config).create(card)


async def _store(hub: Hub, text: str) -> None:
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)


async def _big_runs(hub: Hub, keys: Keys) -> str:
    """BIG_RUNS runs of BIG_CUES cues: a dry run (completed), then newer copies of it,
    cancelled, written as the engine writes a run (a dry run each would take most of a
    minute); the dry run's id."""
    cues = [f"  - {{id: C0, target_agents: [{AGENT}]}}"]
    cues += [
        f"  - {{id: C{n}, target_agents: [{AGENT}], depends_on: [C{n - 1}]}}"
        for n in range(1, BIG_CUES)
    ]
    await _store(hub, "cuelist: big-list\ncues:\n" + "\n".join(cues) + "\n")
    dry_id = (await create_run(RunCreate(cuelist="big-list", dry=True), hub, None)).run_id
    run = await hub.store.run(dry_id)
    assert run is not None and len(run.cues) == BIG_CUES
    for _ in range(BIG_RUNS - 1):
        update = {"run_id": new_id(), "status": RunStatus.CANCELLED, "created_at": time.time()}
        copy = run.model_copy(update=update)
        await hub.store.save_run(copy)
        await hub.transport._client.zadd(keys.all_runs, {copy.run_id: copy.created_at})
    return dry_id


async def _worst_gap_s(stop: asyncio.Event) -> float:
    """The longest the loop went between two wakes of a 10 ms ticker, until `stop`."""
    worst, last = 0.0, time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(0.01)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
    return worst


@pytest.mark.redis
async def test_a_page_of_big_tasks_never_holds_the_loop(
    hub: Hub, settings: Settings, keys: Keys
) -> None:
    """A page of 100 runs of 3,000 cues held the loop 4.4 s (three at once 14.6 s: the
    leader lost its lease): each run was read and its task built on the loop. A big run is
    parsed, and its task built, in a worker thread now: the loop runs between any two.
    The page asks for completed tasks: every run's task is built to be filtered, and the
    answer (one task) costs little to write and read."""
    dry_id = await _big_runs(hub, keys)
    async with api_process(settings) as api:
        client = await _client(api)
        stop = asyncio.Event()
        ticker = asyncio.create_task(_worst_gap_s(stop))
        await asyncio.sleep(0.05)  # the ticker is under way
        asked = ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED)
        page = await client.list_tasks(asked)
        stop.set()
        worst_s = await ticker
        # unfiltered, a page ends once its tasks hold LIST_CUES_MAX cues (the SDK writes
        # its JSON on the loop): the rest is on the next
        first = await client.list_tasks(ListTasksRequest(page_size=100))
        token = first.next_page_token
        rest = await client.list_tasks(ListTasksRequest(page_size=100, page_token=token))
    assert [task.id for task in page.tasks] == [dry_id]
    assert len(page.tasks[0].metadata["cues"]) == BIG_CUES
    assert worst_s < MAX_GAP_S, f"the loop was held {worst_s:.2f} s"
    assert LIST_CUES_MAX // BIG_CUES == 10
    assert len(first.tasks) == 10 and first.next_page_token.endswith(f"/{first.tasks[-1].id}")
    assert len(rest.tasks) == 10 and rest.next_page_token.endswith(f"/{rest.tasks[-1].id}")
    assert not {t.id for t in first.tasks} & {t.id for t in rest.tasks}


@pytest.mark.redis
async def test_the_rest_list_of_big_runs_never_holds_the_loop(
    hub: Hub, settings: Settings, keys: Keys
) -> None:
    """GET /v1/runs (and the MCP tool's list) read a page's runs with `store.runs`, which
    parsed every one on the loop: 30 runs of 2,000 cues held it over a second."""
    await _big_runs(hub, keys)
    async with api_process(settings) as api:
        stop = asyncio.Event()
        ticker = asyncio.create_task(_worst_gap_s(stop))
        await asyncio.sleep(0.05)
        listed = await api.get("/v1/runs", params={"limit": 100})
        stop.set()
        worst_s = await ticker
    assert listed.status_code == 200 and listed.json()["count"] == BIG_RUNS
    assert worst_s < MAX_GAP_S, f"the loop was held {worst_s:.2f} s"


def test_a_reply_text_names_each_thing_once_and_at_most_16() -> None:
    """A text reply naming a condition 2,000 times sent 2,000 commands to the leader, each
    with an idempotency key kept a day; the data part's rule holds for text too."""
    wants = [Need("go", f"G{n}", f"G{n}") for n in range(GATES)]

    def reply(text: str) -> list[tuple[str, str]]:
        message = Message(role=Role.ROLE_USER, message_id="m", parts=[new_text_part(text)])
        return actions(message, wants)

    assert reply("G1 please, then G0 G1 G0") == [("go", "G1"), ("go", "G0")]
    for many in (" ".join(["G0"] * 2000), " ".join(w.name for w in wants)):
        with pytest.raises(InvalidParamsError, match=f"at most {MAX_ACTIONS}"):
            reply(many)


async def _gated_run(hub: Hub) -> str:
    """A run of GATES manual cues, every one armed: each waits for its GO."""
    cues = "".join(f"  - {{id: G{n}, target_agents: [{AGENT}], manual: true}}\n"
                   for n in range(GATES))  # fmt: skip
    await _store(hub, f"cuelist: gates\ndefaults: {{ack_timeout_s: 600}}\ncues:\n{cues}")
    run_id = (await create_run(RunCreate(cuelist="gates"), hub, None)).run_id

    async def armed() -> bool:
        run = await hub.store.run(run_id)
        return run is not None and all(c.state.value == "armed" for c in run.cues.values())

    await eventually(armed, 10, message="every gate armed")
    return run_id


async def _reply_commands(hub: Hub, keys: Keys) -> int:
    """How many commands A2A replies sent the leader (each keeps an idempotency key)."""
    found = hub.transport._client.scan_iter(match=keys.command_idempotency("a2a-reply-*"))
    return len([key async for key in found])


def _reply(run_id: str, text: str) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=run_id,
                      parts=[new_text_part(text)])  # fmt: skip
    config = SendMessageConfiguration(return_immediately=True)
    return SendMessageRequest(message=message, configuration=config)


@pytest.mark.redis
async def test_a_text_reply_sends_each_thing_once_and_refuses_too_many(
    hub: Hub, settings: Settings, keys: Keys
) -> None:
    run_id = await _gated_run(hub)
    async with api_process(settings) as api:
        client = await _client(api)
        everything = " ".join(f"G{n}" for n in range(GATES))
        for refused in (everything, " ".join(["G0"] * 2000)):
            with pytest.raises(InvalidParamsError, match=f"at most {MAX_ACTIONS}"):
                [_ async for _ in client.send_message(_reply(run_id, refused))]
        assert await _reply_commands(hub, keys) == 0  # nothing was sent
        run = await hub.store.run(run_id)
        assert run is not None and all(c.state.value == "armed" for c in run.cues.values())

        [answer] = [e async for e in client.send_message(_reply(run_id, "G0 G1 " * 8))]
        assert answer.task.status.state == TaskState.TASK_STATE_WORKING
        assert await _reply_commands(hub, keys) == 2  # one GO each, not eight

    async def went() -> bool:
        run = await hub.store.run(run_id)
        gone = [g for g, c in run.cues.items() if c.state.value != "armed"] if run else []
        return sorted(gone) == ["G0", "G1"]

    await eventually(went, 10, message="G0 and G1 given their GO")
