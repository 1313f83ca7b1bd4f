"""callboard as an A2A agent: the SDK's `RequestHandler`, over runs (task id = run id).

`message:send` / `message:stream` without a task id start a run of the cuelist named by the
message metadata `skill` (or a data part `{cuelist, version?, params?, dry?}`), once per
message id (the REST API's Idempotency-Key machinery); with a task id they are the
client's reply to an INPUT_REQUIRED run, which raises the condition or fires the GO it
waits for. `tasks/{id}:cancel` cancels the run. Every write is the REST route's own code;
every read is the run state in Redis, so any hub answers for any task, restarts included.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import validate_page_size

from hub.a2a import replies
from hub.a2a.tasks import (
    CONTEXT_PARAM,
    TERMINAL,
    Need,
    agent_message,
    context_id,
    needs,
    plain,
    task_of,
)
from hub.api.idempotency import Asked, fingerprint
from hub.api.routes import runs as routes
from hub.api.schemas import CancelCreate, RunCreate
from hub.engine.state import RunState
from hub.service import Hub
from hub.store.idempotency import ReplyHold
from protocols.cuelist import Cuelist
from protocols.errors import Conflict, NotFound, Unprocessable

BLOCK_MS = 1_000
BATCH = 200
SEND_WAIT_S = 30.0  # message:send answers when the run settles, or with its state by then
REPLY_TTL_S = 24 * 3600
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


class RunTasks(RequestHandler):
    def __init__(self, hub: Hub, stopping: asyncio.Event) -> None:
        self.hub = hub
        self.stopping = stopping

    # -- reads ---------------------------------------------------------------------------

    async def _run(self, run_id: str) -> RunState:
        run = await self.hub.store.run(run_id) if run_id else None
        if run is None:
            raise TaskNotFoundError(f"no task {run_id}")
        return run

    async def _cuelist(self, run: RunState) -> Cuelist:
        return await self.hub.cuelists.get(run.cuelist, run.version)

    async def _task(self, run: RunState, *, artifacts: bool = True) -> Task:
        """The run as a task; its `context` artifact is read only when asked for."""
        context = await self.hub.store.context(run.run_id) if artifacts else None
        return task_of(run, await self._cuelist(run), context)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        return await self._task(await self._run(params.id))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        if params.HasField("page_size"):  # 1 to 100: a size below 1 was ZRANGE's end
            validate_page_size(params.page_size)
        size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        runs = await self.hub.store.runs(await self.hub.store.recent_run_ids(size))
        tasks = []
        for run in runs:
            if params.context_id and context_id(run) != params.context_id:
                continue
            task = await self._task(run)
            if params.status and task.status.state != params.status:
                continue
            tasks.append(task)
        return ListTasksResponse(tasks=tasks, page_size=size, total_size=len(tasks))

    # -- writes --------------------------------------------------------------------------

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        run = await self._run(params.id)
        if run.status.done:
            raise TaskNotCancelableError(f"run {run.run_id} is already {run.status.value}")
        try:
            await routes.cancel(run, self.hub, CancelCreate(reason="cancelled by an A2A client"))
        except Conflict as exc:
            raise TaskNotCancelableError(str(exc)) from None
        return await self._task(await self._run(run.run_id))

    async def _accept(self, params: SendMessageRequest) -> tuple[str, bool]:
        """Start a run for the message, or apply it as a reply; (run id, whether new)."""
        message = params.message
        if not message.message_id:
            raise InvalidParamsError("the message needs a message_id")
        if message.task_id:
            run = await self._run(message.task_id)
            if message.context_id and message.context_id != context_id(run):
                raise InvalidParamsError(
                    f"task {run.run_id} is not of context {message.context_id}"
                )
            await self._reply(run, message)
            return run.run_id, False
        start = replies.start_of(message)
        run_params = dict(start.params)
        if message.context_id:
            run_params[CONTEXT_PARAM] = message.context_id
        body = RunCreate(
            cuelist=start.cuelist, version=start.version, params=run_params, dry=start.dry
        )
        try:
            created = await routes.create_run(body, self.hub, _key("a2a", message.message_id))
        except NotFound as exc:
            raise InvalidParamsError(str(exc)) from None
        except Conflict as exc:  # the message id was used for another request
            raise InvalidParamsError(str(exc)) from None
        return created.run_id, True

    async def _reply(self, run: RunState, message: Message) -> None:
        """Raise the conditions / fire the GOs the reply names, once per message id.

        The first copy of a message reads it (against what the run waits for then) and
        keeps what it was read as under the message id, before anything is sent. Each
        action goes with an Idempotency-Key of its own, derived from the message id, so a
        copy sent again after an error whose outcome is unknown (a 503: the command may
        still be served) sends the same actions under the same keys: each is answered as it
        was the first time (a GO that went is not refused as "not armed" now) and none is
        done twice. A refusal lets the message id go; the same id with another message is
        refused."""
        store = self.hub.stores.idempotency
        key = _key("a2a-reply", message.message_id)
        request = fingerprint(message.SerializeToString(deterministic=True).hex())
        held = await store.reply(key)
        while held is None:
            if run.status.done:
                raise InvalidParamsError(f"run {run.run_id} is {run.status.value}: nothing waits")
            actions = replies.actions(message, await self._wants(run))
            hold = ReplyHold(run_id=run.run_id, request=request, actions=actions)
            held = hold if await store.claim(key, hold, REPLY_TTL_S) else await store.reply(key)
        if held.request != request or held.run_id != run.run_id:
            raise InvalidParamsError(
                f"message id {message.message_id!r} was used for another message"
            )
        try:
            for index, (kind, name) in enumerate(held.actions):
                asked = Asked(key=_key(f"a2a-reply-{index}", message.message_id),
                              path=f"a2a:{kind}:{name}")  # fmt: skip
                if kind == "go":
                    await routes.go(run, name, self.hub, asked)
                else:
                    await routes.raise_condition(run, name, self.hub, asked)
        except (Conflict, NotFound, Unprocessable) as exc:  # Unprocessable: no cue waits for it
            await store.release(key, held)
            raise InvalidParamsError(str(exc)) from None
        # Anything else (503: no leader in time, Redis refusing writes) keeps the message
        # id: a copy sent again sends the same actions under the same keys.

    async def _wants(self, run: RunState) -> list[Need]:
        return needs(run, await self._cuelist(run))

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        run_id, new = await self._accept(params)
        if not params.configuration.return_immediately:
            async for _ in self._updates(run_id, "0-0" if new else "$", max_s=SEND_WAIT_S):
                pass
        return await self._task(await self._run(run_id))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        run_id, new = await self._accept(params)
        yield await self._task(await self._run(run_id))
        async for event in self._updates(run_id, "0-0" if new else "$"):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        task = await self._task(await self._run(params.id))
        if task.status.state in TERMINAL:
            raise UnsupportedOperationError(f"task {params.id} has ended")
        yield task
        async for event in self._updates(params.id, "$"):
            yield event

    async def _updates(
        self, run_id: str, after: str, max_s: float | None = None
    ) -> AsyncGenerator[Event, None]:
        """Each run event as a WORKING status update; after each batch the task's state is
        read from the run, and the stream ends when it ends or needs input (as A2A
        streams do), after its artifacts; or after `max_s` (default `sse_max_s`: the
        client resubscribes)."""
        deadline = time.monotonic() + (max_s or self.hub.settings.sse_max_s)
        last = after
        while not self.stopping.is_set() and time.monotonic() < deadline:
            batch = await self.hub.store.tail_events(run_id, last, BATCH, BLOCK_MS)
            run = await self.hub.store.run(run_id)
            if run is None:
                return
            for event in batch:
                last = event.id
                yield _event_update(run, event.id, event.data)
            task = await self._task(run, artifacts=False)
            if task.status.state in TERMINAL:
                task = await self._task(run)
                for artifact in task.artifacts:
                    yield TaskArtifactUpdateEvent(
                        task_id=task.id, context_id=task.context_id, artifact=artifact,
                        last_chunk=True,
                    )  # fmt: skip
            if task.status.state in TERMINAL or task.status.state in INTERRUPTED:
                yield TaskStatusUpdateEvent(
                    task_id=task.id, context_id=task.context_id, status=task.status
                )
                return

    # -- not offered ---------------------------------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


def _key(kind: str, message_id: str) -> str:
    """An idempotency key for a message id (hashed when long: keys are at most 200)."""
    if len(message_id) > 120:
        message_id = hashlib.sha256(message_id.encode()).hexdigest()
    return f"{kind}:{message_id}"


def _event_update(run: RunState, event_id: str, data: dict[str, Any]) -> TaskStatusUpdateEvent:
    """One run event as a WORKING status update whose message says what happened."""
    status = TaskStatus(
        state=TaskState.TASK_STATE_WORKING,
        message=agent_message(run, replies.describe(data), f"{run.run_id}:{event_id}"),
    )
    update = TaskStatusUpdateEvent(task_id=run.run_id, context_id=context_id(run), status=status)
    update.metadata.update(plain({"event_id": event_id, **data}))
    return update
