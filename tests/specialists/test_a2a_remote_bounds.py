"""A remote A2A task followed within bounds, cheaply: each stream event is merged into the
task in place and its size counted as it grows, so a hostile agent appending one character at
a time costs what it sends, and is stopped past `parts_max` parts an artifact or
`limit_bytes` in all. Against the official `a2a-sdk` server too."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from starlette.applications import Starlette
from starlette.routing import Mount

from protocols.codec import DEFAULT_MAX_MESSAGE_BYTES
from specialists.builtin.a2a_remote import PARTS_MAX, Following, Remote, TooLong, artifact_value
from tests.helpers import eventually


def _append(text: str = "x", artifact_id: str = "a") -> StreamResponse:
    artifact = Artifact(artifact_id=artifact_id, parts=[Part(text=text)])
    return StreamResponse(artifact_update=TaskArtifactUpdateEvent(artifact=artifact, append=True))


def test_20000_one_character_appends_cost_what_they_carry() -> None:
    """20,000 appends of one character to one artifact take well under a second of CPU, and
    the size counted is the task's. On the code before, each event copied and measured the
    whole task: 22 s (52,000 of them, up to the size limit: 139 s), on the replica's loop."""
    following = Following(DEFAULT_MAX_MESSAGE_BYTES, Task(id="t", context_id="c"), 10**6)
    event = _append()
    started = time.process_time()
    for _ in range(20_000):
        task = following.merge(event)
    spent_s = time.process_time() - started
    assert spent_s < 2.0, f"{spent_s:.1f} s of CPU for 20,000 appends"
    assert task is not None and len(task.artifacts) == 1
    assert len(task.artifacts[0].parts) == 20_000
    assert following.size_bytes == task.ByteSize()


def test_appends_past_parts_max_stop_the_following() -> None:
    """The default cap: the append that would take an artifact past `PARTS_MAX` parts is
    refused, as the size limit refuses a task too big to report."""
    following = Following(DEFAULT_MAX_MESSAGE_BYTES, Task(id="t", context_id="c"))
    event = _append()
    started = time.process_time()
    with pytest.raises(TooLong, match=f"artifact 'a' past {PARTS_MAX} parts: not followed"):
        for _ in range(20_000):
            following.merge(event)
    assert time.process_time() - started < 2.0
    assert following.task is not None and len(following.task.artifacts[0].parts) == PARTS_MAX


def test_appends_past_the_size_limit_stop_the_following_as_before() -> None:
    """No parts cap: the size limit stops one-character appends (about 52,000 of them), as
    it did, now in a fraction of the time."""
    following = Following(DEFAULT_MAX_MESSAGE_BYTES, Task(id="t", context_id="c"), 10**6)
    event = _append()
    started = time.process_time()
    with pytest.raises(TooLong, match=f"over the {DEFAULT_MAX_MESSAGE_BYTES}-byte limit"):
        for _ in range(100_000):
            following.merge(event)
    assert time.process_time() - started < 2.0
    assert following.task is not None
    assert following.task.ByteSize() > DEFAULT_MAX_MESSAGE_BYTES
    assert following.task.ByteSize() - DEFAULT_MAX_MESSAGE_BYTES < 16  # the last append's


def test_the_count_follows_every_kind_of_event() -> None:
    """Status updates, new artifacts, appends to the first of an id, a whole task again: the
    merge keeps its meaning (an update without append adds an artifact, even of an id
    seen) and the size counted stays the task's, across varint lengths."""
    following = Following(DEFAULT_MAX_MESSAGE_BYTES)
    working = TaskStatusUpdateEvent(status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    assert following.merge(StreamResponse(status_update=working)) is None  # before the task
    events = [
        StreamResponse(task=Task(id="t", context_id="c")),
        StreamResponse(status_update=working),
        _append("lost", "none-yet"),  # append to no artifact: added as it is
        StreamResponse(
            artifact_update=TaskArtifactUpdateEvent(
                artifact=Artifact(artifact_id="log", name="log", parts=[Part(text="a" * 100)])
            )
        ),
        _append("b" * 200, "log"),  # past 127 bytes: the artifact's length takes 2 bytes
        _append("c" * 20_000, "log"),  # past 16,383: 3 bytes
        StreamResponse(
            artifact_update=TaskArtifactUpdateEvent(artifact=Artifact(artifact_id="log"))
        ),
        _append("d", "log"),  # to the first artifact of the id
        StreamResponse(status_update=TaskStatusUpdateEvent(status=TaskStatus())),
    ]
    for event in events:
        task = following.merge(event)
        assert task is not None and following.size_bytes == task.ByteSize()
    assert task is not None
    assert [a.artifact_id for a in task.artifacts] == ["none-yet", "log", "log"]
    assert artifact_value(task.artifacts[1]) == ["a" * 100, "b" * 200, "c" * 20_000, "d"]
    assert task.status.state == TaskState.TASK_STATE_UNSPECIFIED
    again = Task(id="t", context_id="c", artifacts=[Artifact(artifact_id="log")])
    task = following.merge(StreamResponse(task=again))
    assert task is not None and following.size_bytes == task.ByteSize()
    task = following.merge(_append("e", "log"))  # to the new task's artifact
    assert task is not None and artifact_value(task.artifacts[0]) == "e"


# -- against the official SDK's server ---------------------------------------------------


class _Appender(AgentExecutor):
    """Streams an artifact `log` of one part, then `appends` more of one character each."""

    def __init__(self, appends: int) -> None:
        self.appends = appends

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        await queue.enqueue_event(task)
        updater = TaskUpdater(queue, task.id, task.context_id)
        await updater.start_work()
        await updater.add_artifact([new_text_part("x")], artifact_id="log", name="log")
        for _ in range(self.appends):
            await updater.add_artifact([new_text_part("x")], artifact_id="log", append=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, queue: EventQueue) -> None:
        raise NotImplementedError


@asynccontextmanager
async def _agent(appends: int) -> AsyncIterator[str]:
    """A streaming agent of the official SDK on a free port, over HTTP+JSON: its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="appender", description="appends to one artifact", version="1",
        supported_interfaces=[AgentInterface(url=f"{url}/rest", protocol_binding="HTTP+JSON",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="append", name="append", description="appends", tags=["test"])],
    )  # fmt: skip
    handler = DefaultRequestHandler(
        agent_executor=_Appender(appends), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_agent_card_routes(card), Mount("/rest", routes=create_rest_routes(handler))]
    config = uvicorn.Config(Starlette(routes=routes), host="127.0.0.1", port=port,
                            log_level="warning")  # fmt: skip
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started, 10, message="the agent serving")
        yield url
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


async def _follow(remote: Remote) -> Task | None:
    message = Message(role=Role.ROLE_USER, message_id="m1", parts=[new_text_part("go")])
    last = None
    try:
        async for task in remote.send(message):
            last = task
    finally:
        await remote.close()
    return last


async def test_an_sdk_agent_appending_past_parts_max_is_not_followed_further() -> None:
    """The SDK's agent appends 300 parts to an artifact of one: with a cap of 100 parts the
    send stops with `TooLong` at the append that would pass it; under the default cap the
    task completes whole."""
    async with _agent(appends=300) as url:
        with pytest.raises(TooLong, match="artifact 'log' past 100 parts: not followed"):
            await _follow(Remote(url, parts_max=100))
        task = await _follow(Remote(url))
    assert task is not None and task.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(task.artifacts) == 1 and len(task.artifacts[0].parts) == 301
