"""callboard as an A2A agent: the SDK's `RequestHandler`, over runs (task id = run id).

`message:send` / `message:stream` without a task id start a run of the cuelist named by the
message metadata `skill` (or a data part `{cuelist, version?, params?, dry?}`), once per
message id (the REST API's Idempotency-Key machinery); with a task id they are the
client's reply to an INPUT_REQUIRED run, which raises the condition or fires the GO it
waits for. `tasks/{id}:cancel` cancels the run. Every write is the REST route's own code;
every read is the run state in Redis, so any hub answers for any task, restarts included.
Every wait for a run's events (a stream, a subscription, a blocking send) is an event
stream of the hub's fanout (hub.a2a.stream), under its caps.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import AsyncGenerator
from functools import partial

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
    TaskPushNotificationConfig,
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
from hub.a2a.errors import translated
from hub.a2a.stream import following, updates
from hub.a2a.tasks import CONTEXT_PARAM, TERMINAL, context_id, needs, task_of
from hub.api.idempotency import Asked, fingerprint
from hub.api.offload import off_the_loop_if
from hub.api.routes import runs as routes
from hub.api.schemas import CancelCreate, RunCreate
from hub.engine.state import RunState
from hub.fanout import Follower
from hub.service import Hub
from hub.store.idempotency import ReplyHold
from hub.store.state import StateStore
from protocols.cuelist import Cuelist
from protocols.errors import Conflict, NotFound, Unprocessable

SEND_WAIT_S = 30.0  # message:send answers when the run settles, or with its state by then
REPLY_TTL_S = 24 * 3600
# tasks/list reads at most this many runs per request (filters may leave a page short: its
# next_page_token goes on from where the scan stopped)
LIST_SCAN_MAX = 1_000
# A page of tasks ends once it holds this many cues (its next_page_token goes on): the SDK
# writes the page's JSON on the event loop, about 10 µs a cue
LIST_CUES_MAX = 20_000
MAX_PAGE_SIZE = 100


class RunTasks(RequestHandler):
    def __init__(self, hub: Hub, stopping: asyncio.Event) -> None:
        self.hub = hub
        self.stopping = stopping

    # -- reads ---------------------------------------------------------------------------

    async def _run(self, run_id: str, store: StateStore | None = None) -> RunState:
        run = await (store or self.hub.store).run(run_id) if run_id else None
        if run is None:
            raise TaskNotFoundError(f"no task {run_id}")
        return run

    async def _cuelist(self, run: RunState) -> Cuelist | None:
        """The run's cuelist version; None once it is deleted (the run outlives it)."""
        try:
            return await self.hub.cuelists.get(run.cuelist, run.version)
        except NotFound:
            return None

    async def _task(
        self, run: RunState, *, artifacts: bool = True, store: StateStore | None = None
    ) -> Task:
        """The run as a task; its `context` artifact is read only when asked for. A big
        run's is built in a worker thread (3,000 cues take 70-130 ms), as the REST API
        builds its JSON: a page of them held the loop, and the lease, for seconds."""
        context = await (store or self.hub.store).context(run.run_id) if artifacts else None
        cuelist = await self._cuelist(run)
        big = len(run.cues) > routes.BIG_RUN_CUES
        return await off_the_loop_if(big, partial(task_of, run, cuelist, context))

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        with translated():
            return await self._task(await self._run(params.id))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The newest tasks first, filtered by context and state; a filtered page is filled
        from older runs, reading at most LIST_SCAN_MAX runs, and ends once its tasks hold
        LIST_CUES_MAX cues: a page left short then has a next_page_token (the creation
        time and id of the last run read: runs created meanwhile do not shift the next
        page, as they shifted an offset) that goes on from there."""
        if params.HasField("page_size"):  # 1 to 100: a size below 1 was ZRANGE's end
            validate_page_size(params.page_size)
        size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        cursor = _cursor(params.page_token)
        filtered = bool(params.context_id or params.status)
        window = MAX_PAGE_SIZE if filtered else size
        tasks: list[Task] = []
        scanned, drained, cues = 0, False, 0
        with translated():
            while len(tasks) < size and scanned < LIST_SCAN_MAX and cues < LIST_CUES_MAX:
                rows = await self.hub.store.runs_after(window, cursor)
                read = 0
                for run_id, created in rows:
                    read += 1
                    cursor = (created, run_id)
                    # one run a read, not the window's in one: a big run is parsed in a
                    # worker thread then, and the loop runs between any two of them
                    run = await self.hub.store.run(run_id)
                    listed = run is not None and await self._listed(run, params, tasks)
                    cues += len(run.cues) if run is not None and listed else 0
                    if listed and (len(tasks) == size or cues >= LIST_CUES_MAX):
                        break
                scanned += read
                if len(rows) < window:  # the runs ran out: drained if all of them were read
                    drained = read == len(rows)
                    break
        return ListTasksResponse(
            tasks=tasks, page_size=size, total_size=len(tasks),
            next_page_token="" if drained or cursor is None else _token(cursor),
        )  # fmt: skip

    async def _listed(self, run: RunState, params: ListTasksRequest, tasks: list[Task]) -> bool:
        """Add the run's task to `tasks` if it passes the request's filters."""
        if params.context_id and context_id(run) != params.context_id:
            return False
        task = await self._task(run, artifacts=params.include_artifacts)
        if params.status and task.status.state != params.status:
            return False
        tasks.append(task)
        return True

    # -- writes --------------------------------------------------------------------------

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        with translated():
            run = await self._run(params.id)
            if run.status.done:
                raise TaskNotCancelableError(f"run {run.run_id} is already {run.status.value}")
            try:
                reason = CancelCreate(reason="cancelled by an A2A client")
                await routes.cancel(run, self.hub, reason)
            except Conflict as exc:
                raise TaskNotCancelableError(str(exc)) from None
            return await self._task(await self._run(run.run_id))

    async def _accept(self, params: SendMessageRequest) -> tuple[str, str]:
        """Start a run for the message, or apply it as a reply; the run id, and the event
        its updates follow: "0-0" for a new run (all of them), for a reply the run's
        newest event before it (the client sees what its reply did)."""
        message = params.message
        if not message.message_id:
            raise InvalidParamsError("the message needs a message_id")
        if message.task_id:
            run = await self._run(message.task_id)
            if message.context_id and message.context_id != context_id(run):
                raise InvalidParamsError(
                    f"task {run.run_id} is not of context {message.context_id}"
                )
            before = await self.hub.fanout.store.events_position(run.run_id)
            await self._reply(run, message)
            return run.run_id, before
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
        return created.run_id, "0-0"

    async def _reply(self, run: RunState, message: Message) -> None:
        """Raise the conditions / fire the GOs the reply names, once per message id.

        The first copy of a message reads it (against what the run waits for then: every
        action is checked before any is sent, so a refused reply changes nothing) and
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
            cuelist = await self._cuelist(run)
            actions = replies.actions(message, needs(run, cuelist))
            replies.check(actions, run, cuelist)
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

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        with translated():
            if params.configuration.return_immediately:
                run_id, _ = await self._accept(params)
                return await self._task(await self._run(run_id))
            client = _client(context)
            self.hub.fanout.admit(client)  # no stream to spare: refused before anything is done
            run_id, after = await self._accept(params)
            async with following(self.hub.fanout, run_id, client) as sub:
                async for _ in self._updates(sub, after, SEND_WAIT_S):
                    pass
            return await self._task(await self._run(run_id))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        client = _client(context)
        with translated():
            self.hub.fanout.admit(client)
            run_id, after = await self._accept(params)
            async with following(self.hub.fanout, run_id, client) as sub:
                yield await self._task(await self._run(run_id))
                async for event in self._updates(sub, after):
                    yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        with translated():
            run = await self._run(params.id)
            if (await self._task(run, artifacts=False)).status.state in TERMINAL:
                raise UnsupportedOperationError(f"task {params.id} has ended")
            async with following(self.hub.fanout, run.run_id, _client(context)) as sub:
                # the position, then the task: every event up to it is in that task
                after = await self.hub.fanout.store.events_position(run.run_id)
                yield await self._read(await self._run(run.run_id, self.hub.fanout.store), True)
                async for event in self._updates(sub, after):
                    yield event

    def _updates(
        self, sub: Follower, after: str, max_s: float | None = None
    ) -> AsyncGenerator[Event, None]:
        max_s = max_s or self.hub.settings.sse_max_s  # then the client resubscribes
        return updates(self.hub.fanout, sub, after, max_s, self._read, self.stopping)

    async def _read(self, run: RunState, artifacts: bool) -> Task:
        """The task of a run being followed: what it reads, on the fanout's connections."""
        return await self._task(run, artifacts=artifacts, store=self.hub.fanout.store)

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


def _client(context: ServerCallContext) -> str:
    """Who asks (the address mount.ClientContext noted), for the fanout's per-client cap."""
    return str(context.state.get("client") or "unknown")


def _token(cursor: tuple[float, str]) -> str:
    """A tasks/list page token: the creation time and id of the last run a page read."""
    return f"{cursor[0]!r}/{cursor[1]}"


def _cursor(page_token: str) -> tuple[float, str] | None:
    """The (creation time, run id) a tasks/list page token goes on after (`_token`)."""
    if not page_token:
        return None
    score, _, run_id = page_token.partition("/")
    try:
        at = float(score)
    except ValueError:
        at = math.nan
    if not (math.isfinite(at) and run_id) or len(page_token) > 300:
        raise InvalidParamsError(f"page token {page_token[:40]!r} is not one this hub gave")
    return at, run_id
