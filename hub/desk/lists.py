"""The desk's catalogue pages: cuelists (each version, its YAML, warnings and graph), agents
with the wiring map, escalations, and dead letters."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from hub.api.deps import AgentsDep, HubDep
from hub.desk import dag, data, wiring
from hub.desk.login import PageAuth
from hub.desk.problems import PageRoute, missing
from hub.desk.render import page
from protocols import validation
from protocols.errors import NotFound

router = APIRouter(include_in_schema=False, dependencies=PageAuth, route_class=PageRoute)
Version = Annotated[str | None, Query(max_length=200)]
_WARNINGS: OrderedDict[tuple[str, str], list[Any]] = OrderedDict()
CACHED_WARNINGS = 64
ENVELOPE_FIELDS = ("message_type", "run_id", "cue_id")  # what deadletters.html shows


def _warnings(name: str, version: str, source: str | None) -> list[Any]:
    """The stored source's validation warnings (a version never changes: checked once)."""
    key = (name, version)
    if key not in _WARNINGS:
        _WARNINGS[key] = list(validation.validate_text(source).warnings) if source else []
        while len(_WARNINGS) > CACHED_WARNINGS:
            _WARNINGS.popitem(last=False)
    return _WARNINGS[key]


@router.get("/cuelists", response_class=HTMLResponse)
async def cuelists(request: Request, hub: HubDep) -> HTMLResponse:
    summaries = await data.cuelist_summaries(hub)
    return HTMLResponse(page(request, "cuelists.html", nav="cuelists", cuelists=summaries))


@router.get("/cuelists/{name}", response_class=HTMLResponse)
async def cuelist(
    request: Request, hub: HubDep, name: str, version: Version = None
) -> HTMLResponse:
    try:
        described = await data.describe_cuelist(hub, name)
        chosen = version or described["latest"]
        stored = next((v for v in described["versions"] if v["version"] == chosen), None)
        if stored is None:
            raise NotFound(f"no version {chosen} of cuelist {name}")
        model = await data.cuelist_of(hub, name, chosen)
    except NotFound as exc:
        return missing(request, str(exc))
    source = stored["source"] or json.dumps(stored["cuelist"], indent=2)
    return HTMLResponse(page(
        request, "cuelist.html", nav="cuelists", name=name, described=described,
        version=chosen, stored=stored, source=source, cuelist=model,
        warnings=_warnings(name, chosen, stored["source"]),
        picture=dag.picture(name, chosen, model, None),
    ))  # fmt: skip


@router.get("/agents", response_class=HTMLResponse)
async def agents(request: Request, hub: HubDep, registry: AgentsDep) -> HTMLResponse:
    described = await data.agents(registry)
    wired = await data.wiring(hub, described)
    return HTMLResponse(page(
        request, "agents.html", nav="agents", agents=described, wiring=wired,
        map=wiring.picture(wired),
    ))  # fmt: skip


@router.get("/escalations", response_class=HTMLResponse)
async def escalations(request: Request, hub: HubDep) -> HTMLResponse:
    escs = await data.escalations(hub)
    opened = data.open_by_severity(escs)
    rest = [e for e in escs if e not in opened]
    return HTMLResponse(
        page(request, "escalations.html", nav="escalations", opened=opened, rest=rest)
    )


def _envelope(raw_text: str) -> dict[str, str]:
    """The type, run and cue a dead letter belonged to, when its body is an envelope: only
    those the page shows, and only strings (it was dead-lettered for being malformed, so
    a `run_id` may be a number, a list or anything else JSON holds)."""
    try:
        body = json.loads(raw_text)
    except (ValueError, RecursionError):  # a body of "[[[[..." nests past Python's stack
        return {}
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in ENVELOPE_FIELDS if isinstance(body.get(k), str)}


@router.get("/deadletters", response_class=HTMLResponse)
async def dead_letters(request: Request, hub: HubDep) -> HTMLResponse:
    letters = [
        {**d, "envelope": _envelope(d.get("raw_text", ""))} for d in await data.dead_letters(hub)
    ]
    return HTMLResponse(page(request, "deadletters.html", nav="deadletters", letters=letters))
