"""A run as an A2A task: when it needs an operator (INPUT_REQUIRED) and what a reply gives."""

from __future__ import annotations

import asyncio

import pytest
from a2a.helpers import new_data_part, new_text_part
from a2a.server.context import ServerCallContext
from a2a.types import ListTasksRequest, Message, Role, TaskState
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from hub.a2a.handler import RunTasks, _event_update
from hub.a2a.replies import actions, start_of
from hub.a2a.tasks import Need, needs, state_of, task_of
from hub.api.routes.runs import create_run
from hub.api.schemas import RunCreate
from hub.service import Hub
from hub.store.state import ContextEntry
from protocols.canonical import canonical_json
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
