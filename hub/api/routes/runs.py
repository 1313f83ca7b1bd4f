"""Runs: start (with Idempotency-Key), list, inspect, GO, retry, rerun, conditions, cancel,
events, context."""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Response, status
from fastapi.sse import EventSourceResponse, ServerSentEvent

from hub.api import idempotency, sse
from hub.api.deps import EventSlotDep, HubDep, RunDep, StoppingDep
from hub.api.idempotency import AskedDep
from hub.api.offload import off_the_loop_if
from hub.api.routes.budgets import budget_changes
from hub.api.schemas import (
    CancelCreate,
    CancelPublic,
    ConditionPublic,
    ConditionRefused,
    ContextEntryPublic,
    ContextPublic,
    ErrorPublic,
    GoPublic,
    RerunCreate,
    RerunCreated,
    RetryPublic,
    RunCreate,
    RunCreated,
    RunPublic,
    RunsPublic,
)
from hub.api.views import run_public, run_summary
from hub.commands import Cancel, Command, Go, RaiseCondition, Rerun, Retry, StartRun
from hub.commands.models import R
from hub.engine.state import RunState
from hub.service import Hub
from hub.store.commands import QueueFull
from protocols.cuelist import NAME_MAX
from protocols.errors import Conflict, EngineError, NotFound, Unprocessable
from protocols.keys import ENTRY_ID_PARAM, is_entry_id

router = APIRouter(prefix="/runs", tags=["runs"])
Name = Annotated[str, Path(min_length=1, max_length=NAME_MAX)]  # a cue id, a condition
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorPublic}}
REFUSED: dict[int | str, dict[str, Any]] = {**NOT_FOUND, 409: {"model": ErrorPublic}}
# The event stream's errors are JSON, not text/event-stream: documented by hand.
_ERROR_JSON = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorPublic"}}}
JSON_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": what, "content": _ERROR_JSON}
    for code, what in [(400, "bad request"), (401, "missing or wrong API key"),
                       (404, "no such run"), (422, "invalid request")]
}  # fmt: skip


async def _call(hub: Hub, command: Command[R]) -> R:
    return await hub.commands.call(command, timeout_s=hub.settings.command_timeout_s)


def waited_for(cuelist: Any) -> list[str]:
    """The conditions some cue of the cuelist lists, in the order they first appear."""
    return list(dict.fromkeys(c for cue in cuelist.cues for c in cue.conditions))


def unwanted_condition(run_id: str, name: str, wanted: list[str]) -> Unprocessable:
    """The 422 for a condition no cue of the run waits for: what it does wait for, and the
    closest of those to what was sent (a typo is the likely cause)."""
    close = difflib.get_close_matches(name, wanted, n=1, cutoff=0.6)
    guess = close[0] if close else None
    if wanted:
        detail = f"no cue of run {run_id} waits for condition {name!r}; it waits for "
        detail += ", ".join(wanted) + (f" (did you mean {guess}?)" if guess else "")
    else:
        detail = f"no cue of run {run_id} waits for condition {name!r}: it waits for none"
    return Unprocessable(detail, conditions=wanted, did_you_mean=guess)


def _must_be_live(run: RunState) -> None:
    if run.status.done:
        raise Conflict(f"run {run.run_id} is already {run.status.value}")


@router.post("", response_model=RunCreated, status_code=status.HTTP_201_CREATED, responses=REFUSED)
async def create_run(
    body: RunCreate,
    hub: HubDep,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=200)] = None,
) -> RunCreated:
    version = body.version or await hub.cuelists.latest(body.cuelist)
    if version is None:
        raise NotFound(f"no cuelist named {body.cuelist}")
    if not await hub.cuelists.listed(body.cuelist, version):  # unknown, or deleted
        raise NotFound(f"no version {version} of cuelist {body.cuelist}")
    cuelist = await hub.cuelists.get(body.cuelist, version)
    budget = None if body.budget is None else budget_changes(body.budget, cuelist.budget)
    run_id = hub.new_run_id(claims_resources=cuelist.claims_resources)
    if idempotency_key:
        request = idempotency.request_text(body)
        while (held := await idempotency.claim(hub, idempotency_key, run_id, request)) is not None:
            timeout_s = hub.settings.command_timeout_s + 5
            if await idempotency.wait_for_run(hub, idempotency_key, held, timeout_s):
                return RunCreated(run_id=held)
    command = StartRun(
        cuelist=body.cuelist, version=version, run_id=run_id, params=body.params, dry=body.dry,
        budget=budget, idempotency_key=idempotency_key,
        request=idempotency.fingerprint(idempotency.request_text(body)) if idempotency_key else "",
    )  # fmt: skip
    try:
        await _call(hub, command)
    except (EngineError, QueueFull) as exc:  # refused, or not queued: the key is free again
        if isinstance(exc, EngineError) and await hub.store.run(run_id) is not None:
            return RunCreated(run_id=run_id)  # "failing" after the try that wrote it
        if idempotency_key:
            await idempotency.release(hub, idempotency_key, run_id, idempotency.request_text(body))
        raise
    # Anything else (503: no leader in time, Redis refusing writes) keeps the key: the
    # command may be queued still, and a retry must get its run, not a second one.
    return RunCreated(run_id=run_id)


@router.get("", response_model=RunsPublic)
async def list_runs(
    hub: HubDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cuelist: Annotated[str | None, Query()] = None,
    run_status: Annotated[str | None, Query(alias="status")] = None,
) -> RunsPublic:
    runs = await hub.store.runs(await hub.store.recent_run_ids(limit))
    data = [
        run_summary(r)
        for r in runs
        if (cuelist is None or r.cuelist == cuelist)
        and (run_status is None or r.status.value == run_status)
    ]
    return RunsPublic(data=data, count=len(data))


@router.get("/{run_id}", response_model=RunPublic, responses=NOT_FOUND)
async def get_run(run: RunDep) -> Response:
    """The run as JSON; a big run's is built in a worker thread (a 10,000-cue run takes a
    quarter of a second), so a client polling it never holds the engine's event loop."""
    body = await off_the_loop_if(len(run.cues) > BIG_RUN_CUES, partial(_run_json, run))
    return Response(content=body, media_type="application/json")


BIG_RUN_CUES = 200


def _run_json(run: RunState) -> bytes:
    return run_public(run).model_dump_json().encode()


async def run_view(run: RunState) -> RunPublic:
    """`run_public`, off the event loop for a big run (as `get_run`)."""
    return await off_the_loop_if(len(run.cues) > BIG_RUN_CUES, partial(run_public, run))


@router.post("/{run_id}/cues/{cue_id}/go", response_model=GoPublic, responses=REFUSED)
async def go(run: RunDep, cue_id: Name, hub: HubDep, key: AskedDep = None) -> GoPublic:
    async def command() -> Go:
        if cue_id not in run.cues:
            raise NotFound(f"run {run.run_id} has no cue {cue_id}")
        _must_be_live(run)
        return Go(run_id=run.run_id, cue_id=cue_id)

    reply = await idempotency.call(hub, key, Go, command)
    return GoPublic(run_id=run.run_id, cue=cue_id, state=reply.state, attempt=reply.attempt)


@router.post("/{run_id}/cues/{cue_id}/retry", response_model=RetryPublic, responses=REFUSED)
async def retry(run: RunDep, cue_id: Name, hub: HubDep, key: AskedDep = None) -> RetryPublic:
    """Try a failed cue again (a new attempt; the cues it blocked wait again), or the failed
    cue a blocked one waits on; a run that ended failed or partial runs again. 409 with the
    reason for any other cue."""

    async def command() -> Retry:
        if cue_id not in run.cues:
            raise NotFound(f"run {run.run_id} has no cue {cue_id}")
        # a run that ended keeps no hold on its version: reopened after a delete, it ran on
        # the leader's cached plan, and no hub after it could load the run
        if not await hub.cuelists.listed(run.cuelist, run.version):
            raise NotFound(f"version {run.version} of cuelist {run.cuelist} was deleted")
        return Retry(run_id=run.run_id, cue_id=cue_id)

    reply = await idempotency.call(hub, key, Retry, command)
    return RetryPublic(
        run_id=run.run_id, cue=cue_id, state=reply.state, attempt=reply.attempt,
        retried=reply.retried,
    )  # fmt: skip


@router.post(
    "/{run_id}/rerun", response_model=RerunCreated, status_code=status.HTTP_201_CREATED,
    responses=REFUSED,
)  # fmt: skip
async def rerun(
    run: RunDep, hub: HubDep, body: RerunCreate | None = None, key: AskedDep = None
) -> RerunCreated:
    """A new run of the same cuelist version, linked both ways (`rerun_of`, `reruns`);
    `from_failure` skips the cues that completed, carrying their results and context. With
    an Idempotency-Key, the same request again answers with the same new run."""

    async def command() -> Rerun:
        if run.dry:
            raise Conflict(f"run {run.run_id} is a dry run: start a new one")
        if not await hub.cuelists.listed(run.cuelist, run.version):
            raise NotFound(f"version {run.version} of cuelist {run.cuelist} was deleted")
        new_run_id = hub.new_run_id(beside=run.run_id)
        from_failure = bool(body and body.from_failure)
        return Rerun(run_id=run.run_id, new_run_id=new_run_id, from_failure=from_failure)

    reply = await idempotency.call(hub, key, Rerun, command, body)
    return RerunCreated(run_id=reply.run_id, rerun_of=run.run_id)


@router.post(
    "/{run_id}/conditions/{name:path}", response_model=ConditionPublic,
    responses={**REFUSED, 422: {"model": ConditionRefused}},
)  # fmt: skip
async def raise_condition(
    run: RunDep, name: Name, hub: HubDep, key: AskedDep = None
) -> ConditionPublic:
    """Raise a flag a cue of the run waits for (422, naming those, for any other). A
    condition's name may hold `/` (protocols.cuelist.NAME_PATTERN): the rest of the path is
    the name, sent as is or with its `/` encoded."""

    async def command() -> RaiseCondition:
        _must_be_live(run)
        wanted = waited_for(await hub.cuelists.get(run.cuelist, run.version))
        if name not in wanted:
            raise unwanted_condition(run.run_id, name, wanted)
        return RaiseCondition(run_id=run.run_id, name=name)

    reply = await idempotency.call(hub, key, RaiseCondition, command)
    return ConditionPublic(run_id=run.run_id, condition=name, conditions=reply.conditions)


@router.post("/{run_id}/cancel", response_model=CancelPublic, responses=REFUSED)
async def cancel(
    run: RunDep, hub: HubDep, body: CancelCreate | None = None, key: AskedDep = None
) -> CancelPublic:
    async def command() -> Cancel:
        _must_be_live(run)
        reason = (body.reason if body else None) or "cancelled by operator"
        return Cancel(run_id=run.run_id, reason=reason)

    reply = await idempotency.call(hub, key, Cancel, command, body)
    return CancelPublic(run_id=run.run_id, status=reply.status)


def _events_after(
    # a string when sent (never null: a header has no null), "" when not
    last_event_id: Annotated[str, Header(max_length=64, pattern=ENTRY_ID_PARAM)] = "",
    after: Annotated[
        str | None,
        Query(
            max_length=64, pattern=ENTRY_ID_PARAM,
            description="start after this event id (a page drawn from the run's state at "
            "that event); a reconnecting client's Last-Event-ID wins",
        ),
    ] = None,
) -> str:  # fmt: skip
    """Where a run's event stream starts: after the reconnecting client's last event, else
    after `after`, else at the first. 422 for an id Redis would not take."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value and not is_entry_id(value):
            raise HTTPException(422, f"{name}: {value!r} is not a stream entry id Redis accepts")
    return last_event_id or after or "0-0"


@router.get(
    "/{run_id}/events", response_class=EventSourceResponse,
    responses={**JSON_ERRORS, 503: {"model": ErrorPublic}},
)  # fmt: skip
async def events(
    run: RunDep,
    hub: HubDep,
    stopping: StoppingDep,
    after: Annotated[str, Depends(_events_after)],
    client: EventSlotDep,
) -> AsyncIterator[ServerSentEvent]:
    """The run's events from the start (or after `after`, or `Last-Event-ID`), live until
    it finishes. 503 with Retry-After when the hub, or this client, has the most streams
    open it may."""
    max_s = hub.settings.sse_max_s
    async for event in sse.follow(hub.fanout, run.run_id, after, stopping, client, max_s):
        kind = str(event.data.get("type", "event"))
        yield ServerSentEvent(id=event.id, event=kind, data=event.data)


@router.get("/{run_id}/context", response_model=ContextPublic, responses=NOT_FOUND)
async def context(
    run: RunDep,
    hub: HubDep,
    tag: Annotated[str | None, Query(max_length=200)] = None,
    source: Annotated[str | None, Query(max_length=200)] = None,
) -> ContextPublic:
    entries = {
        key: ContextEntryPublic.model_validate(entry.model_dump())
        for key, entry in (await hub.store.context(run.run_id)).items()
        if (tag is None or tag in entry.tags) and (source is None or entry.source == source)
    }
    return ContextPublic(run_id=run.run_id, entries=entries, count=len(entries))
