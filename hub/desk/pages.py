"""The desk's pages: the board, a run, and the parts of each the browser refreshes live."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from hub.api.deps import HubDep
from hub.desk import dag, data
from hub.desk.login import PageAuth, signed_in
from hub.desk.problems import PageRoute, missing
from hub.desk.render import page
from protocols.errors import NotFound
from protocols.states import CueState, RunStatus

router = APIRouter(include_in_schema=False, dependencies=PageAuth, route_class=PageRoute)
parts_router = APIRouter(include_in_schema=False)  # answers 401 (not a redirect) to fetch()
RUN_STATUSES = [s.value for s in RunStatus]
CUE_STATES = [s.value for s in CueState]
MAX_ROWS_ASKED = 200  # a refresh naming more cues than this re-renders every row
Status = Annotated[str | None, Query(max_length=20)]
Name = Annotated[str | None, Query(max_length=200)]
Page = Annotated[int, Query(ge=1, le=100_000, alias="page")]


def _part(name: str, request: Request, **context: Any) -> str:
    return page(request, name, **context)


async def _board(hub: Any, status: str | None, cuelist: str | None, page_no: int) -> dict[str, Any]:
    status = status if status in RUN_STATUSES else None
    return {
        "runs": await data.runs_page(hub, status=status, cuelist=cuelist or None, page=page_no),
        "inbox": await data.inbox(hub),
        "filters": {"status": status or "", "cuelist": cuelist or ""},
        "statuses": RUN_STATUSES,
        "cue_states": CUE_STATES,
        "cuelists": await data.cuelist_names(hub),
    }


@router.get("/", response_class=HTMLResponse)
async def board(
    request: Request, hub: HubDep, status: Status = None, cuelist: Name = None, page_no: Page = 1
) -> HTMLResponse:
    context = await _board(hub, status, cuelist, page_no)
    return HTMLResponse(page(request, "board.html", nav="board", **context))


@parts_router.get("/board/parts")
async def board_parts(
    request: Request, hub: HubDep, status: Status = None, cuelist: Name = None, page_no: Page = 1
) -> JSONResponse:
    if not signed_in(request):
        return JSONResponse({"detail": "log in again"}, status_code=401)
    context = await _board(hub, status, cuelist, page_no)
    return JSONResponse({"parts": {
        "runs": _part("_runs.html", request, **context),
        "inbox": _part("_inbox.html", request, **context),
    }})  # fmt: skip


async def _run(hub: Any, run_id: str) -> dict[str, Any]:
    """A run's page context. Without its cuelist version (deleted once no active run used
    it) the page still shows the run's own record: its cues, states, events and context,
    but no graph nor cue descriptions, which only the cuelist holds."""
    run = await data.run(hub, run_id)
    cuelist = await data.pinned_cuelist(hub, run)
    escs = await data.run_escalations(hub, run_id)
    return {
        "run": run,
        "cuelist": cuelist,
        "cue_of": {c.id: c for c in cuelist.cues} if cuelist else {},
        "picture": dag.picture(run.cuelist, run.version, cuelist, run.cues) if cuelist else None,
        "approvals": await data.approvals_of(hub, run),
        "escalations": escs,
        "open_escalations": data.open_by_severity(escs),
        "context": await data.context(hub, run_id),
        "live": data.is_live(run),
        "cue_states": CUE_STATES,
    }


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, hub: HubDep, run_id: str) -> HTMLResponse:
    # the page follows the run's events after the newest one its state holds: read first
    events_after = await hub.store.events_position(run_id)
    try:
        context = await _run(hub, run_id)
    except NotFound as exc:
        return missing(request, str(exc))
    return HTMLResponse(
        page(request, "run.html", nav="board", events_after=events_after, **context)
    )


@parts_router.get("/runs/{run_id}/parts")
async def run_parts(
    request: Request,
    hub: HubDep,
    run_id: str,
    cues: Annotated[str | None, Query(max_length=8000)] = None,
) -> JSONResponse:
    """What changed since the page was drawn: the named cues' timeline rows (every row when
    `cues` is `*` or long), their nodes' states, and the run's small parts."""
    if not signed_in(request):
        return JSONResponse({"detail": "log in again"}, status_code=401)
    context = await _run(hub, run_id)
    run = context["run"]
    asked = [c for c in (cues or "").split(",") if c in run.cues]
    if cues == "*" or len(asked) > MAX_ROWS_ASKED:
        asked = list(run.cues)
    rows = {
        cue_id: page(request, "_row.html", cue_id=cue_id, cr=run.cues[cue_id], **context)
        for cue_id in asked
    }
    nodes = {
        cue_id: {"state": cr.state.value, "holds": list(cr.holds), "reason": cr.reason or ""}
        for cue_id, cr in run.cues.items()
        if cue_id in asked or cr.holds
    }
    return JSONResponse({
        "status": run.status.value, "live": context["live"], "rows": rows, "nodes": nodes,
        "parts": {
            name: _part(f"_{name}.html", request, **context)
            for name in ("runhead", "record", "context", "needs")
        },
    })  # fmt: skip
