"""One remote A2A agent as the `a2a` specialist sees it: its card, an official `a2a-sdk`
client, and following a task (streaming when the card says so, else polling) as snapshots.

The bearer token goes only to the agent's own origin (the scheme, host and port of its
URL): a card naming an interface elsewhere gets the call, not the token. Never in a URL,
never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.errors import AgentCardResolutionError
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
from a2a.utils.errors import A2AError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict, ParseError

from protocols.codec import DEFAULT_MAX_MESSAGE_BYTES
from specialists.builtin.a2a_http import bounding

TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
BINDINGS = [TransportProtocol.HTTP_JSON.value, TransportProtocol.JSONRPC.value]
PROBE_TASK = "callboard-auth-probe"  # a task id no agent has: asked for to test the token
PARTS_MAX = 10_000  # parts of one artifact, as appends build it, followed (Following)


class TooLong(Exception):
    """The remote's task grew past what a message may hold, or one of its artifacts past
    `PARTS_MAX` parts: it could not be reported."""


def state_name(state: TaskState) -> str:
    """`TASK_STATE_INPUT_REQUIRED` -> `input_required`."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


class _OwnOrigin(httpx.Auth):
    """The bearer token, on requests to the origin of `url` only: the card an agent serves
    may name any URL as its interface, and a token sent there (another host, an internal
    one) would be the agent's to hand on."""

    def __init__(self, url: str, token: str) -> None:
        self.origin = _origin(httpx.URL(url))
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if _origin(request.url) == self.origin:
            request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme)


_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass
class Remote:
    """A remote agent at `url`: the card (cached `card_ttl_s`) and a client per streaming mode."""

    url: str
    token: str | None = None
    timeout_s: float = 30.0
    card_ttl_s: float = 60.0
    limit_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # of an answer, an event, a task as held
    parts_max: int = PARTS_MAX  # of an artifact as a task's appends build it
    # httpx event hooks (specialists.tracing.request_hooks: the W3C traceparent header)
    event_hooks: dict[str, list[Any]] = field(default_factory=dict)
    http: httpx.AsyncClient = field(init=False)
    _card: AgentCard | None = field(default=None, init=False)
    _card_at: float = field(default=0.0, init=False)
    _clients: dict[bool, Client] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        auth = _OwnOrigin(self.url, self.token) if self.token else None
        hooks = {**self.event_hooks}
        hooks["response"] = [*hooks.get("response", []), bounding(self.limit_bytes)]
        self.http = httpx.AsyncClient(timeout=self.timeout_s, auth=auth, event_hooks=hooks)

    async def card(self, *, fresh: bool = False) -> AgentCard:
        """The agent card at `{url}/.well-known/agent-card.json`."""
        if fresh or self._card is None or time.monotonic() - self._card_at > self.card_ttl_s:
            card = await self._fetch_card()
            if self._card is None or card.SerializeToString() != self._card.SerializeToString():
                self._clients.clear()  # the interfaces may have moved: new clients
            self._card, self._card_at = card, time.monotonic()
        return self._card

    async def _fetch_card(self) -> AgentCard:
        """The card, read up to `limit_bytes` (as every answer is: the SDK's A2ACardResolver
        reads it whole, and a hostile agent's may have no end), then parsed as the SDK does."""
        url = self.url + AGENT_CARD_WELL_KNOWN_PATH
        try:
            response = await self.http.get(url)
            response.raise_for_status()
            return parse_agent_card(json.loads(response.content))
        except (httpx.HTTPError, ValueError, ParseError) as exc:
            status = exc.response.status_code if isinstance(exc, httpx.HTTPStatusError) else None
            raise AgentCardResolutionError(
                f"no agent card from {url}: {exc}", status_code=status
            ) from exc

    async def streams(self) -> bool:
        return bool((await self.card()).capabilities.streaming)

    async def client(self, *, streaming: bool | None = None) -> Client:
        """An SDK client for the card's preferred interface; `streaming=False` sends without
        waiting (return_immediately) and leaves the following to polling."""
        card = await self.card()
        mode = bool(card.capabilities.streaming) if streaming is None else streaming
        client = self._clients.get(mode)
        if client is None:
            config = ClientConfig(
                httpx_client=self.http, streaming=mode, polling=not mode,
                supported_protocol_bindings=list(BINDINGS),
            )  # fmt: skip
            client = self._clients[mode] = ClientFactory(config).create(card)
        return client

    async def send(self, message: Message) -> AsyncIterator[Task]:
        """Send `message` and yield what is known of its task after each event: one `Task`,
        updated in place (`Following`), so a snapshot holds until the next is asked for."""
        streaming = await self.streams()
        client = await self.client(streaming=streaming)
        following = Following(self.limit_bytes, parts_max=self.parts_max)
        async for event in client.send_message(SendMessageRequest(message=message)):
            task = following.merge(event)
            if task is not None:
                yield task

    async def subscribe(self, task_id: str, known: Task) -> AsyncIterator[Task]:
        """Follow a task's stream from now on (the agent sends the task first)."""
        client = await self.client(streaming=True)
        following = Following(self.limit_bytes, known, self.parts_max)
        async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
            task = following.merge(event)
            if task is not None:
                yield task

    async def get(self, task_id: str) -> Task:
        return await (await self.client()).get_task(GetTaskRequest(id=task_id))

    async def cancel(self, task_id: str) -> Task:
        return await (await self.client()).cancel_task(CancelTaskRequest(id=task_id))

    async def find(self, context_id: str, message_id: str) -> str | None:
        """The task of `context_id` whose history holds our message `message_id`: how a
        redelivered GO finds the task a crashed replica started, when no marker says."""
        try:
            page = await (await self.client()).list_tasks(
                ListTasksRequest(context_id=context_id, history_length=100)
            )
        except A2AError:
            return None  # the agent does not list tasks: nothing to find
        for task in page.tasks:
            if any(m.message_id == message_id for m in task.history):
                return str(task.id)
        return None

    async def auth_works(self) -> tuple[bool, str]:
        """Whether the agent accepts our credentials: ask for a task nobody has; 'not
        found' means we were let in, 401/403 that we were not."""
        card = await self.card(fresh=True)
        if not card.security_requirements:
            return True, ""
        try:
            await self.get(PROBE_TASK)
        except TaskNotFoundError:
            return True, ""
        except A2AError as exc:
            if _status_of(exc) in (401, 403):
                return False, f"the agent at {self.url} refused our credentials ({exc})"[:500]
            return True, ""  # another error: the call was let in
        return True, ""

    async def close(self) -> None:
        for sdk in self._clients.values():  # the SDK clients share self.http
            await sdk.close()
        self._clients.clear()
        await self.http.aclose()


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status behind an SDK error (it wraps httpx's), if there was one."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, httpx.HTTPStatusError):
            return seen.response.status_code
        seen = seen.__cause__
    return None


class Following:
    """One task as its stream's events come (the task, status and artifact updates), kept
    within bounds: `limit_bytes` in all, `parts_max` parts an artifact; past either the
    task is not followed further (`TooLong`) and the cue fails, as its result could not be
    sent anyway.

    The task is updated in place, its size counted as it changes and an artifact found by
    its id, so an event costs what it carries, not what the task holds: copied and measured
    whole per event, 20,000 one-character appends took 22 s of the replica's loop."""

    def __init__(
        self, limit_bytes: int, task: Task | None = None, parts_max: int = PARTS_MAX
    ) -> None:
        self.limit_bytes, self.parts_max = limit_bytes, parts_max
        self.task: Task | None = None
        self.size_bytes = 0  # what task.ByteSize() would say
        self._sizes: list[int] = []  # each artifact's ByteSize(), in order
        self._first: dict[str, int] = {}  # artifact id -> where its first artifact is
        if task is not None:
            self._take(task)

    def merge(self, event: StreamResponse) -> Task | None:
        """The task as known after `event` (None while updates come before the task)."""
        kind = event.WhichOneof("payload")
        if kind == "task":
            self._take(event.task)
        if self.task is None:
            return None  # updates before the task itself: wait for it
        if kind == "status_update":
            self._status(self.task, event.status_update.status)
        elif kind == "artifact_update":
            self._artifact(self.task, event.artifact_update)
        if self.size_bytes > self.limit_bytes:
            raise TooLong(
                f"the remote task {self.task.id} is over the {self.limit_bytes}-byte limit of "
                "a message: not followed further"
            )
        return self.task

    def _take(self, task: Task) -> None:
        self.task, self.size_bytes = task, task.ByteSize()
        self._sizes = [artifact.ByteSize() for artifact in task.artifacts]
        self._first = {}
        for at, artifact in enumerate(task.artifacts):
            self._first.setdefault(artifact.artifact_id, at)

    def _status(self, task: Task, status: TaskStatus) -> None:
        before = _framed(task.status.ByteSize()) if task.HasField("status") else 0
        task.status.CopyFrom(status)
        self.size_bytes += _framed(status.ByteSize()) - before

    def _artifact(self, task: Task, update: TaskArtifactUpdateEvent) -> None:
        """Append `update`'s parts to the first artifact of its id, else add the artifact."""
        at = self._first.get(update.artifact.artifact_id) if update.append else None
        if at is None:
            self._first.setdefault(update.artifact.artifact_id, len(task.artifacts))
            task.artifacts.append(update.artifact)
            self._sizes.append(update.artifact.ByteSize())
            self.size_bytes += _framed(self._sizes[-1])
            return
        artifact = task.artifacts[at]
        if len(artifact.parts) + len(update.artifact.parts) > self.parts_max:
            raise TooLong(
                f"the remote task {task.id} appended to its artifact {artifact.artifact_id!r} "
                f"past {self.parts_max} parts: not followed further"
            )
        artifact.parts.extend(update.artifact.parts)
        before = self._sizes[at]
        self._sizes[at] += sum(_framed(part.ByteSize()) for part in update.artifact.parts)
        self.size_bytes += _framed(self._sizes[at]) - _framed(before)


def _framed(size: int) -> int:
    """The bytes a nested message of `size` bytes takes in its parent: a one-byte tag (every
    field here is numbered under 16), its length as a varint, then itself."""
    return 1 + max(1, (size.bit_length() + 6) // 7) + size


async def follow(
    remote: Remote,
    first: AsyncIterator[Task] | None,
    task_id: str | None,
    poll_s: float,
    wake: asyncio.Event,
) -> AsyncIterator[Task]:
    """Snapshots of one task until it ends: from `first` (the send's own stream), else from
    the task `task_id` (a redelivered GO picks it up again); then by the agent's stream
    while it works, and by `tasks/get` every `poll_s` (or on `wake`) while it waits for
    input or the agent does not stream."""
    last: Task | None = None
    if first is not None:
        try:
            async for last in first:
                yield last
        except A2AError:
            if last is None:
                raise  # nothing was sent, or we cannot tell: the GO fails (and may retry)
            # the stream broke after the task began: follow it by its id below
    elif task_id is not None:
        last = await remote.get(task_id)
        yield last
    if last is None:
        raise RuntimeError(f"the agent at {remote.url} answered without a task")
    while last.status.state not in TERMINAL:
        if await remote.streams() and last.status.state not in INTERRUPTED:
            try:
                async for update in remote.subscribe(last.id, last):
                    last = update
                    yield last
            except A2AError:
                pass  # ended meanwhile, or no resubscribing here: tasks/get says which
            if last.status.state in TERMINAL:
                return
        wake.clear()  # an answer sent from this replica wakes us at once
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), poll_s)
        fresh = await remote.get(last.id)
        if _changed(last, fresh):
            yield fresh
        last = fresh


def _changed(before: Task, after: Task) -> bool:
    return (
        before.status.state != after.status.state
        or before.status.message.message_id != after.status.message.message_id
        or len(before.artifacts) != len(after.artifacts)
    )


def text_of(message: Message) -> str:
    return "\n".join(p.text for p in message.parts if p.WhichOneof("content") == "text")


def part_value(part: Part) -> Any:
    """A part as JSON: text as a string, data as itself, a file as a reference."""
    kind = part.WhichOneof("content")
    if kind == "text":
        return part.text
    if kind == "data":
        return _ints(MessageToDict(part.data))
    ref: dict[str, Any] = {"media_type": part.media_type, "filename": part.filename}
    if kind == "url":
        ref["url"] = part.url
    elif kind == "raw":
        ref["size"] = len(part.raw)  # the bytes stay with the agent's answer, not the context
    return {k: v for k, v in ref.items() if v not in ("", None)}


def artifact_value(artifact: Artifact) -> Any:
    values = [part_value(p) for p in artifact.parts]
    return values[0] if len(values) == 1 else values


def _ints(value: Any) -> Any:
    """protobuf's Value keeps every number as a double: whole ones become ints again."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value
