"""A run as an A2A task: when it needs an operator (INPUT_REQUIRED) and what a reply gives."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from a2a.helpers import new_data_part, new_text_part
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.types import GetTaskRequest, ListTasksRequest, Message, Role, TaskState
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from hub.a2a.errors import Unavailable
from hub.a2a.handler import RunTasks
from hub.a2a.replies import actions, check, start_of
from hub.a2a.stream import _event_update
from hub.a2a.tasks import CONTEXT_PARAM, Need, needs, state_of, task_of
from hub.api.routes.runs import create_run
from hub.api.schemas import RunCreate
from hub.service import Hub
from hub.store.state import ContextEntry
from protocols.canonical import canonical_json
from protocols.errors import Unreachable
from protocols.validation import load_cuelist
from tests.hub.sim import Sim, plan_of

GATED = """
cuelist: gated
cues:
  - {id: BUILD, target_agents: [a], raises: [built]}
  - {id: TEST, target_agents: [a], depends_on: [BUILD], conditions: [built, approval_received]}
  - {id: SHIP, target_agents: [a], depends_on: [TEST], manual: true}
"""


def test_input_required_only_when_nothing_moves_and_an_operator_must_act() -> None:
    plan = plan_of(GATED)
    sim = Sim(plan)
    sim.start()
    run = sim.run()
    # BUILD runs and will raise `built`: only the approval is the operator's
    assert needs(run, plan.cuelist) == [Need("condition", "approval_received", "TEST")]
    assert state_of(run, needs(run, plan.cuelist)) == TaskState.TASK_STATE_WORKING
    sim.call_through("BUILD", ["a"])
    wants = needs(run, plan.cuelist)
    assert wants == [Need("condition", "approval_received", "TEST")]
    task = task_of(run, plan.cuelist)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "waits for condition approval_received" in task.status.message.parts[0].text
    assert task.id == run.run_id == task.context_id
    sim.engine.raise_condition("r1", "approval_received")
    sim._drain()
    assert state_of(run, needs(run, plan.cuelist)) == TaskState.TASK_STATE_WORKING
    sim.call_through("TEST", ["a"])
    assert needs(run, plan.cuelist) == [Need("go", "SHIP", "SHIP")]
    assert task_of(run, plan.cuelist).status.state == TaskState.TASK_STATE_INPUT_REQUIRED


def _reply(*parts: object) -> Message:
    return Message(role=Role.ROLE_USER, message_id="m", parts=list(parts))  # type: ignore[arg-type]


def test_what_a_reply_gives() -> None:
    one = [Need("condition", "approval_received", "TEST")]
    two = [*one, Need("go", "SHIP", "SHIP")]
    data = new_data_part({"condition": ["a", "b"], "go": "SHIP"})
    assert actions(_reply(data), two) == [("condition", "a"), ("condition", "b"), ("go", "SHIP")]
    assert actions(_reply(new_text_part("SHIP")), two) == [("go", "SHIP")]
    assert actions(_reply(new_text_part("Approve.")), one) == [("condition", "approval_received")]
    with pytest.raises(InvalidParamsError, match="approval_received"):
        actions(_reply(new_text_part("approve")), two)  # two things wait: say which
    with pytest.raises(InvalidParamsError):
        actions(_reply(new_text_part("sure, why not")), one)


def test_which_cuelist_a_message_starts() -> None:
    by_skill = Message(message_id="m", parts=[new_text_part("x")], metadata={"skill": "gated"})
    assert start_of(by_skill).cuelist == "gated"
    spec = {"cuelist": "gated", "version": "v1", "params": {"n": 1}, "dry": True}
    by_data = start_of(_reply(new_data_part(spec)))
    assert (by_data.cuelist, by_data.version, by_data.params, by_data.dry) == (
        "gated", "v1", {"n": 1}, True,
    )  # fmt: skip
    with pytest.raises(InvalidParamsError, match="name the cuelist"):
        start_of(_reply(new_text_part("run something")))


def test_a_result_no_protobuf_number_holds_leaves_the_task_readable() -> None:
    """A target's result with an int past a float's range made building the task raise
    (OverflowError), and a NaN in its context made writing the task as JSON raise: every
    A2A read of the run, and tasks/list of every run while it was among the newest,
    failed. Such a number is now its digits (the int) or null (NaN, as the REST API
    writes it)."""
    plan = plan_of("cuelist: odd\ncues:\n  - {id: ONLY, target_agents: [mallory]}\n")
    sim = Sim(plan)
    sim.start()
    sim.ack_warning("mallory", "ONLY")
    sim.ack_standby("mallory", "ONLY")
    sim.complete("mallory", "ONLY", big=10**400, n=2)
    odd = {"k": ContextEntry(value=[float("nan"), float("-inf"), 10**400], source="mallory")}
    task = task_of(sim.run(), plan.cuelist, odd)
    found = {a.artifact_id: MessageToDict(a.parts[0].data) for a in task.artifacts}
    assert found == {
        "results": {"ONLY": {"mallory": {"big": str(10**400), "n": 2.0}}},
        "context": {"k": [None, None, str(10**400)]},
    }
    cue_event = [e for _, e in sim.events if e["type"] == "cue" and e.get("result")][-1]
    update = _event_update(sim.run(), "1-0", cue_event)
    assert MessageToDict(update)["metadata"]["result"]["mallory"]["big"] == str(10**400)


@pytest.mark.redis
async def test_a_task_list_page_is_1_to_100_tasks(hub: Hub) -> None:
    """tasks/list with pageSize -1 answered every run the hub holds but the oldest (1,000
    dry runs held: 999 tasks, 715 KB, each task with its run's whole context) where a page
    holds at most 100: the size went to ZRANGE as its end. A size outside 1-100 is invalid
    params now (HTTP 400), as A2A says."""
    text = "cuelist: listed\ncues:\n  - {id: A, target_agents: [nobody]}\n"
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    for _ in range(3):
        await create_run(RunCreate(cuelist="listed", dry=True), hub, None)
    tasks = RunTasks(hub, asyncio.Event())
    call = ServerCallContext()
    assert len((await tasks.on_list_tasks(ListTasksRequest(), call)).tasks) == 3
    assert len((await tasks.on_list_tasks(ListTasksRequest(page_size=2), call)).tasks) == 2
    for size in (-1, -(2**31), 101):
        with pytest.raises(InvalidParamsError, match="page size"):
            await tasks.on_list_tasks(ListTasksRequest(page_size=size), call)


def test_a_reply_gives_at_most_16_things_each_once() -> None:
    """One reply naming the same condition 2,000 times sent 2,000 commands to the leader,
    each with an idempotency key kept a day."""
    one = [Need("condition", "approval_received", "TEST")]
    again = new_data_part({"condition": ["approval_received"] * 3, "go": ["SHIP", "SHIP"]})
    assert actions(_reply(again), one) == [("condition", "approval_received"), ("go", "SHIP")]
    assert len(actions(_reply(new_data_part({"go": [f"C{n}" for n in range(16)]})), one)) == 16
    for many in (["approval_received"] * 2000, [f"c{n}" for n in range(17)]):
        with pytest.raises(InvalidParamsError, match="at most 16"):
            actions(_reply(new_data_part({"condition": many})), one)
    with pytest.raises(InvalidParamsError, match="name or a list of names"):
        actions(_reply(new_data_part({"go": {"cue": "SHIP"}})), one)


def test_values_are_taken_as_sent() -> None:
    """`dry: "false"` started a dry run (bool("false")); `params: {n: 3}` arrived as 3.0."""
    spec = {"cuelist": "gated", "params": {"n": 3, "x": 2.5, "big": 2**60, "l": [1, {"m": 2}]}}
    params = start_of(_reply(new_data_part(spec))).params
    assert params == {"n": 3, "x": 2.5, "big": float(2**60), "l": [1, {"m": 2}]}
    assert type(params["n"]) is int and type(params["l"][1]["m"]) is int
    assert type(params["big"]) is float  # past 2**53 a float is not the integer sent
    for dry in ("false", 0, "yes", None):
        with pytest.raises(InvalidParamsError, match="dry"):
            start_of(_reply(new_data_part({"cuelist": "gated", "dry": dry})))


def test_a_reply_is_checked_whole_before_anything_is_sent() -> None:
    plan = plan_of(GATED)
    sim = Sim(plan)
    sim.start()
    run = sim.run()
    check([("condition", "approval_received")], run, plan.cuelist)
    with pytest.raises(InvalidParamsError, match="no cue NOPE"):
        check([("condition", "approval_received"), ("go", "NOPE")], run, plan.cuelist)
    with pytest.raises(InvalidParamsError, match="SHIP is not armed: it is waiting"):
        check([("go", "SHIP")], run, plan.cuelist)
    with pytest.raises(InvalidParamsError, match="did you mean approval_received"):
        check([("condition", "aproval_received")], run, plan.cuelist)


async def test_redis_out_is_unavailable_not_a_traceback() -> None:
    """A Redis outage in a handler reached the SDK as an unknown exception: HTTP 500, or
    -32603, and a traceback in the log. It is Unavailable now: 503 with the reason."""

    class Down:
        async def run(self, run_id: str) -> None:
            raise Unreachable("connection refused")

    tasks = RunTasks(SimpleNamespace(store=Down()), asyncio.Event())  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="cannot reach Redis") as refused:
        await tasks.on_get_task(GetTaskRequest(id="r1"), ServerCallContext())
    payload = build_rest_error_payload(refused.value)["error"]
    assert (payload["code"], payload["status"]) == (503, "UNAVAILABLE")
    assert payload["details"][0]["metadata"] == {"retry_after_s": "5"}
    assert build_error_response(1, refused.value)["error"]["code"] == -32603


@pytest.mark.redis
async def test_tasks_of_a_context_are_found_past_the_newest_page(hub: Hub) -> None:
    """tasks/list by context filtered only the newest page (50 runs): a context's older
    tasks were not listed at all. Older runs fill the page now, and a page token goes on."""
    text = "cuelist: paged\ncues:\n  - {id: A, target_agents: [nobody]}\n"
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    mine = [
        (await create_run(RunCreate(cuelist="paged", dry=True, params={CONTEXT_PARAM: "ctx"}),
                          hub, None)).run_id
        for _ in range(3)
    ]  # fmt: skip
    for _ in range(60):
        await create_run(RunCreate(cuelist="paged", dry=True), hub, None)
    tasks = RunTasks(hub, asyncio.Event())
    call = ServerCallContext()
    found = await tasks.on_list_tasks(ListTasksRequest(context_id="ctx"), call)
    assert sorted(t.id for t in found.tasks) == sorted(mine)
    assert found.next_page_token == ""  # every run was read
    seen: list[str] = []
    token = ""
    for _ in range(10):
        page = await tasks.on_list_tasks(ListTasksRequest(page_size=25, page_token=token), call)
        seen += [t.id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen)) == 63 and set(mine) <= set(seen)
    for bad in ("-3", "12", "nan/run-1", "inf/run-1", "1.5/"):
        with pytest.raises(InvalidParamsError, match="page token"):
            await tasks.on_list_tasks(ListTasksRequest(page_token=bad), call)


@pytest.mark.redis
async def test_runs_created_between_pages_neither_repeat_nor_hide_tasks(hub: Hub) -> None:
    """The page token was an offset into the runs, newest first: three runs created after
    the first page shifted the second by three, and it repeated the first's last three.
    Runs of one creation time (ties) are each listed once too."""
    text = "cuelist: shifted\ncues:\n  - {id: A, target_agents: [nobody]}\n"
    parsed, version = load_cuelist(text)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), text)
    for _ in range(12):
        await create_run(RunCreate(cuelist="shifted", dry=True), hub, None)
    tied = [f"run-tied-{i}" for i in range(4)]  # one creation time: ordered by id
    client = hub.transport._client
    await client.zadd(hub.keys.all_runs, {run_id: 1.0 for run_id in tied})
    tasks, call = RunTasks(hub, asyncio.Event()), ServerCallContext()
    first = await tasks.on_list_tasks(ListTasksRequest(page_size=5), call)
    for _ in range(3):
        await create_run(RunCreate(cuelist="shifted", dry=True), hub, None)
    seen, token = [t.id for t in first.tasks], first.next_page_token
    while token:
        page = await tasks.on_list_tasks(ListTasksRequest(page_size=5, page_token=token), call)
        seen += [t.id for t in page.tasks]
        token = page.next_page_token
    assert len(seen) == len(set(seen)) == 12  # the index's tied ids have no run: not listed
    read: list[str] = []
    after = None
    while rows := await hub.store.runs_after(3, after):
        read += [run_id for run_id, _ in rows]
        after = (rows[-1][1], rows[-1][0])
    assert read[-4:] == sorted(tied, reverse=True) and len(read) == len(set(read)) == 19


def test_a_condition_raised_only_by_the_cues_after_it_is_the_operators() -> None:
    """SIGN waits for `signed`, which only NOTIFY raises, and NOTIFY waits for SIGN: no cue
    will give it. The engine holds such a run for the operator (and the desk offers the
    flag); the task said WORKING, asking the client for nothing, as it counted NOTIFY a
    giver."""
    plan = plan_of("""
cuelist: downstream
cues:
  - {id: SIGN, target_agents: [a], conditions: [signed]}
  - {id: NOTIFY, target_agents: [a], depends_on: [SIGN], raises: [signed]}
""")
    sim = Sim(plan)
    sim.start()
    run = sim.run()
    assert needs(run, plan.cuelist) == [Need("condition", "signed", "SIGN")]
    assert task_of(run, plan.cuelist).status.state == TaskState.TASK_STATE_INPUT_REQUIRED
