"""A run's events as A2A task updates, through the hub's event fanout (hub.fanout), as the
REST event stream takes them (hub.api.sse): each stream holds one of the fanout's slots
(its global and per-client caps), replays on the fanout's own connections, then takes new
events from the shared reader's queue. No A2A wait reads, let alone blocks, on the hub's
own pool: that pool is the engine's and the lease's."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from a2a.server.events.event_queue import Event
from a2a.types import (
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from hub.a2a import replies
from hub.a2a.errors import translated
from hub.a2a.tasks import TERMINAL, agent_message, context_id, plain
from hub.engine.state import RunState
from hub.fanout import EventFanout, Follower

INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
TaskOf = Callable[[RunState, bool], Awaitable[Task]]  # (run, with its context artifact)


@contextlib.asynccontextmanager
async def following(fanout: EventFanout, run_id: str, client: str) -> AsyncIterator[Follower]:
    """A slot of the fanout for the run; Unavailable (503, Retry-After) past a cap."""
    with translated():
        async with fanout.follow(run_id, client) as sub:
            yield sub


async def updates(
    fanout: EventFanout, sub: Follower, after: str, max_s: float, task_of: TaskOf,
    stopping: asyncio.Event,
) -> AsyncGenerator[Event, None]:  # fmt: skip
    """The run's events after entry `after`, each as a WORKING status update. Once the
    replay has caught up, and after each live batch, the task's state is read from the
    run: the stream ends when the task ends or needs input (as A2A streams do: its
    artifacts, then its final status), when the hub stops or the fanout ends it (the
    client fell behind), or after `max_s` (the client resubscribes)."""
    deadline = time.monotonic() + max_s
    async for batch in fanout.batches(sub, after, deadline, stopping):
        run = await fanout.store.run(sub.run_id)
        if run is None:
            return  # expired
        for event in batch.events:
            yield _event_update(run, event.id, event.data)
        if not batch.caught_up:
            continue  # the state is read when the replay has caught up
        task = await task_of(run, False)
        if task.status.state in TERMINAL:
            task = await task_of(run, True)
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


def _event_update(run: RunState, event_id: str, data: dict[str, Any]) -> TaskStatusUpdateEvent:
    """One run event as a WORKING status update whose message says what happened."""
    status = TaskStatus(
        state=TaskState.TASK_STATE_WORKING,
        message=agent_message(run, replies.describe(data), f"{run.run_id}:{event_id}"),
    )
    update = TaskStatusUpdateEvent(task_id=run.run_id, context_id=context_id(run), status=status)
    update.metadata.update(plain({"event_id": event_id, **data}))
    return update
