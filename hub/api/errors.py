"""The one place that maps protocols.errors (and bad requests) to JSON HTTP errors with `detail`.

NotFound -> 404, Conflict -> 409, Unprocessable -> 422 (with its fields), other EngineError
-> 409, CuelistError -> 422 with `errors`, HandoffRejected / ProtocolError -> 422,
TransportError (Redis, no leader) -> 503, request validation -> 422 with `errors`, anything
unexpected -> 500 without a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from protocols.errors import (
    CallboardError,
    Conflict,
    CuelistError,
    EngineError,
    HandoffRejected,
    NotFound,
    ProtocolError,
    TransportError,
    Unprocessable,
)

log = logging.getLogger(__name__)

_STATUS: list[tuple[type[CallboardError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (Unprocessable, 422),
    (EngineError, 409),
    (CuelistError, 422),
    (HandoffRejected, 422),
    (ProtocolError, 422),
    (TransportError, 503),
]


def status_of(exc: CallboardError) -> int:
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code
    return 400


def issue_dict(issue: Any) -> dict[str, Any]:
    """One cuelist issue as `{code, message, cue, key, line}` (a model, a dict or a string)."""
    if isinstance(issue, dict):
        get = issue.get
    elif isinstance(issue, str):
        return {"code": "invalid", "message": issue, "cue": None, "key": None, "line": None}
    else:

        def get(name: str, default: Any = None) -> Any:
            return getattr(issue, name, default)

    out = {name: get(name) for name in ("code", "message", "cue", "key", "line")}
    severity = get("severity")
    if severity is not None:
        out["severity"] = str(getattr(severity, "value", severity))
    return out


def _json(
    status: int, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=status, headers=headers)


async def _callboard(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CallboardError)
    if isinstance(exc, CuelistError):
        return _json(422, str(exc), errors=[issue_dict(i) for i in exc.issues])
    if isinstance(exc, HandoffRejected):
        return _json(422, str(exc), missing=exc.missing)
    if isinstance(exc, Unprocessable):
        return _json(422, str(exc), **exc.fields)
    status = status_of(exc)
    headers = {"Retry-After": "1"} if status == 503 else None
    return _json(status, str(exc) or type(exc).__name__, headers)


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    issues = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
        issues.append({
            "code": err.get("type", "invalid"), "message": err.get("msg", ""),
            "cue": None, "key": ".".join(loc) or None, "line": None,
        })  # fmt: skip
    first = issues[0] if issues else {"key": None, "message": "invalid request"}
    where = f"{first['key']}: " if first["key"] else ""
    return _json(422, f"invalid request: {where}{first['message']}", errors=issues)


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Starlette names only the first route on the path
        headers["Allow"] = _allowed(request)
    return _json(exc.status_code, detail, headers)


def _allowed(request: Request) -> str:
    """Every method some route on this path answers (RFC 9110: the Allow of a 405)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # Redis errors never get here: the storage gateway raised them as TransportError (503).
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return _json(500, "internal error (see the hub's log)")


def install(app: FastAPI) -> None:
    app.add_exception_handler(CallboardError, _callboard)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
