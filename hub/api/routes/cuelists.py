"""Cuelists: submit (YAML or JSON, validated, stored by version), validate only, list,
describe, delete (a version or all), and pause or resume a schedule."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, status

from hub.api.deps import HubDep
from hub.api.errors import issue_dict
from hub.api.offload import off_the_loop_if
from hub.api.schemas import (
    CuelistDeleted,
    CuelistErrorPublic,
    CuelistPublic,
    CuelistsPublic,
    CuelistStored,
    CuelistSummary,
    CuelistVersionPublic,
    ErrorPublic,
    SchedulePublic,
    ValidationPublic,
    ts,
)
from hub.service import Hub
from protocols import canonical, validation
from protocols.errors import CuelistError, NotFound
from protocols.loader import parse_json

router = APIRouter(prefix="/cuelists", tags=["cuelists"])
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")
JSON_TYPES = ("application/json",)
_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "object"}},
        },
    }
}
Strict = Annotated[bool, Query(description="conflicts are errors, not warnings")]


def _refuse(code: str, message: str) -> CuelistError:
    return CuelistError(
        [{"code": code, "message": message, "cue": None, "key": None, "line": None}]
    )


async def _report(request: Request, strict: bool, hub: Hub | None = None) -> Any:
    """Parse the body by its content type and run every check on it; with the hub, also
    warn of cues whose `target` no online agent matches now, and of handoffs the online
    agents' registered contracts refuse."""
    report = await _checked(request, strict)
    if hub is not None:
        online = list((await hub.registry.online_stored()).values())
        report = validation.with_registry_warnings(report, online, strict)
    return report


async def _checked(request: Request, strict: bool) -> Any:

    media = request.headers.get("content-type", "application/yaml").split(";")[0].strip().lower()
    body = await request.body()
    if media in JSON_TYPES:
        try:
            doc = parse_json(body)  # a key twice in one object is refused, as in YAML
        except (ValueError, UnicodeDecodeError) as exc:
            raise _refuse("json", f"the body is not JSON: {exc}") from None
        except RecursionError:  # json's C decoder gives up on deep nesting this way
            raise _refuse("too_large", "the JSON body is nested too deeply") from None
        if not isinstance(doc.data, dict):
            raise _refuse("json", "a cuelist must be a JSON object")
        check = partial(validation.validate_data, doc.data, strict=strict, issues=doc.issues)
        return await off_the_loop_if(len(body) > BIG_BODY_BYTES, check)
    if media in YAML_TYPES:
        check_text = partial(validation.validate_text, body, strict=strict)
        return await off_the_loop_if(len(body) > BIG_BODY_BYTES, check_text)
    raise HTTPException(
        status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
        f"send the cuelist as application/yaml or application/json, not {media!r}",
    )


BIG_BODY_BYTES = 64 * 1024  # a cuelist this big (about 1,000 cues) is checked off the loop


def _issues(items: Any) -> list[dict[str, Any]]:
    return [issue_dict(i) for i in items or []]


@router.post(
    "",
    response_model=CuelistStored,
    status_code=status.HTTP_201_CREATED,
    responses={422: {"model": CuelistErrorPublic}, 415: {"model": CuelistErrorPublic}},
    openapi_extra=_BODY,
)
async def submit_cuelist(request: Request, hub: HubDep, strict: Strict = False) -> CuelistStored:
    """Validate and store a cuelist; its version is the SHA-256 of its canonical form."""
    report = await _report(request, strict, hub)
    if not report.valid:
        raise CuelistError(list(report.errors))
    cuelist = report.cuelist
    source = (await request.body()).decode("utf-8", errors="replace")
    created = await hub.cuelists.put(
        cuelist, report.version, canonical.canonical_json(cuelist), source
    )
    return CuelistStored.model_validate(
        {
            "name": cuelist.cuelist,
            "version": report.version,
            "warnings": _issues(report.warnings),
            "created": created,
        }
    )


@router.post(
    "/validate",
    response_model=ValidationPublic,
    responses={422: {"model": CuelistErrorPublic}},
    openapi_extra=_BODY,
)
async def validate_cuelist(
    request: Request, hub: HubDep, strict: Strict = False
) -> ValidationPublic:
    """The same checks as submitting; stores nothing."""
    try:
        report = await _report(request, strict, hub)
    except CuelistError as exc:
        return ValidationPublic.model_validate(
            {"valid": False, "errors": _issues(exc.issues), "warnings": []}
        )
    return validation_public(report)


def validation_public(report: Any) -> ValidationPublic:
    """A validation report as the API shows it (also the MCP server's `validate_cuelist`)."""
    cuelist = report.cuelist if report.valid else None
    return ValidationPublic.model_validate(
        {
            "valid": report.valid,
            "errors": _issues(report.errors),
            "warnings": _issues(report.warnings),
            "name": getattr(cuelist, "cuelist", None),
            "version": report.version if cuelist else None,
        }
    )


@router.get("", response_model=CuelistsPublic)
async def list_cuelists(hub: HubDep) -> CuelistsPublic:
    data = []
    for name in await hub.cuelists.names():
        described = await hub.cuelists.describe(name)
        data.append(
            CuelistSummary(name=name, latest=described.latest, versions=len(described.versions))
        )
    return CuelistsPublic(data=data, count=len(data))


@router.get("/{name}", response_model=CuelistPublic, responses={404: {"model": ErrorPublic}})
async def get_cuelist(hub: HubDep, name: Annotated[str, Path(max_length=200)]) -> CuelistPublic:
    described = await hub.cuelists.describe(name)
    versions = [
        CuelistVersionPublic(
            version=v.version, stored_at=ts(v.stored_at), cuelist=v.cuelist, source=v.source
        )
        for v in described.versions
    ]
    return CuelistPublic(name=name, latest=described.latest, versions=versions)


NameArg = Annotated[str, Path(max_length=200)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorPublic}}


@router.delete("/{name}", response_model=CuelistDeleted, responses=NOT_FOUND)
async def delete_cuelist(
    hub: HubDep,
    name: NameArg,
    version: Annotated[str | None, Query(max_length=200, description="only this version")] = None,
) -> CuelistDeleted:
    """Delete every version of a cuelist, or one: afterwards GET answers 404 and new runs of
    it are refused; runs already going keep the version they are pinned to."""
    deleted = await hub.cuelists.delete(name, version)
    return CuelistDeleted(name=name, deleted=deleted)


@router.post("/{name}/schedule/pause", response_model=SchedulePublic, responses=NOT_FOUND)
async def pause_schedule(hub: HubDep, name: NameArg) -> SchedulePublic:
    """Scheduled runs of the cuelist stop starting (runs going on are not touched)."""
    return await _schedule(hub, name, paused=True)


@router.post("/{name}/schedule/resume", response_model=SchedulePublic, responses=NOT_FOUND)
async def resume_schedule(hub: HubDep, name: NameArg) -> SchedulePublic:
    """Scheduled runs start again from the next tick (ticks missed are not made up)."""
    return await _schedule(hub, name, paused=False)


async def _schedule(hub: Hub, name: str, paused: bool) -> SchedulePublic:
    latest = await hub.cuelists.latest(name)
    if latest is None:
        raise NotFound(f"no cuelist named {name}")
    cuelist = await hub.cuelists.get(name, latest)
    await hub.stores.schedules.set_paused(name, paused)
    return SchedulePublic(name=name, schedule=cuelist.schedule, paused=paused)
