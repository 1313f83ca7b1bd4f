"""A stand-in hub for CLI tests: an httpx.MockTransport that answers every route of
callboard/commands/routes.py in the shapes of hub/api/schemas.py (and, for a route still
to come, the shape its command expects), and records what was called."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard.commands import api
from callboard.commands.routes import ESC, ROUTES, RUN

RUN2 = "0190a3b4-5c6d-7e8f-9a0b-222222222222"
VERSION = "ab" * 32
CUE = {
    "state": "completed", "reason": None, "attempt": 1, "fired_by": "start", "warned_at": None,
    "go_at": None, "completed_at": None, "targets": {"a": "completed"}, "error": None,
}  # fmt: skip
RECORD = {
    "version": VERSION, "started_at": None, "completed_at": None, "duration_s": 1.0,
    "counts": {"completed": 1}, "fired": ["CUE-1"], "waits": [], "conflicts": [],
    "escalations": [], "errors": [], "messages_in": 1, "messages_out": 1,
    "protocol_violations": 0,
}  # fmt: skip
SUMMARY = {
    "run_id": RUN, "cuelist": "demo", "version": VERSION, "status": "success", "dry": False,
    "started_at": None, "completed_at": None, "counts": {"completed": 1},
}  # fmt: skip
ESCALATION = {
    "id": ESC, "type": "escalation.timeout", "severity": "medium", "run_id": RUN,
    "cue_id": "CUE-1", "cause": "timeout", "detail": "no ack", "payload": {},
    "raised_by": "hub", "status": "open", "count": 1, "created_at": None, "updated_at": None,
    "resolution": None,
}  # fmt: skip
METRICS = "# HELP cb_routed_total routed\n# TYPE cb_routed_total counter\ncb_routed_total 3.0\n"


def run_body(status: str = "success") -> dict[str, Any]:
    return {
        **SUMMARY, "status": status, "params": {}, "conditions": [], "hold_reason": None,
        "created_at": None, "record": RECORD, "cues": {"CUE-1": CUE},
    }  # fmt: skip


def sse(*events: tuple[str, dict[str, Any]]) -> str:
    return "".join(
        f"id: {i}-0\nevent: {name}\ndata: {json.dumps(data)}\n\n"
        for i, (name, data) in enumerate(events, 1)
    )


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


TEMPLATES = [(method, path, _pattern(path)) for method, path, _ in ROUTES]


def template(method: str, path: str) -> str | None:
    """The route a request is for, as routes.py spells it."""
    for m, p, pattern in TEMPLATES:
        if m == method and pattern.match(path):
            return p
    return None


ANSWERS: dict[tuple[str, str], tuple[int, Any]] = {
    ("GET", "/healthz"): (200, {"status": "ok", "hub_id": "hub-1", "leader": True, "redis": True}),
    ("GET", "/metrics"): (200, METRICS),
    ("POST", "/v1/cuelists"): (201, {"name": "demo", "version": VERSION, "warnings": []}),
    ("POST", "/v1/cuelists/validate"): (
        200,
        {"valid": True, "errors": [], "warnings": [], "name": "demo", "version": VERSION},
    ),
    ("GET", "/v1/cuelists"): (
        200,
        {"data": [{"name": "demo", "latest": VERSION, "versions": 1}], "count": 1},
    ),
    ("GET", "/v1/cuelists/{name}"): (
        200,
        {
            "name": "demo",
            "latest": VERSION,
            "versions": [
                {
                    "version": VERSION,
                    "stored_at": None,
                    "cuelist": {"cues": [{}]},
                    "source": "cuelist: demo\n",
                }
            ],
        },
    ),
    ("DELETE", "/v1/cuelists/{name}"): (200, {"name": "demo", "deleted": [VERSION]}),
    ("POST", "/v1/cuelists/{name}/schedule/pause"): (
        200,
        {"name": "demo", "schedule": "0 3 * * *", "paused": True},
    ),
    ("POST", "/v1/cuelists/{name}/schedule/resume"): (
        200,
        {"name": "demo", "schedule": "0 3 * * *", "paused": False},
    ),
    ("POST", "/v1/runs"): (201, {"run_id": RUN}),
    ("GET", "/v1/runs"): (200, {"data": [SUMMARY], "count": 1}),
    ("GET", "/v1/runs/{run_id}"): (200, run_body()),
    ("POST", "/v1/runs/{run_id}/cues/{cue_id}/go"): (
        200,
        {"run_id": RUN, "cue": "CUE-1", "state": "warning", "attempt": 1},
    ),
    ("POST", "/v1/runs/{run_id}/cues/{cue_id}/retry"): (
        200,
        {"run_id": RUN, "cue": "CUE-1", "state": "warning", "attempt": 2},
    ),
    ("POST", "/v1/runs/{run_id}/rerun"): (201, {"run_id": RUN2, "rerun_of": RUN}),
    ("POST", "/v1/runs/{run_id}/conditions/{name}"): (
        200,
        {"run_id": RUN, "condition": "approval_received", "conditions": ["approval_received"]},
    ),
    ("POST", "/v1/runs/{run_id}/cancel"): (200, {"run_id": RUN, "status": "cancelled"}),
    ("POST", "/v1/runs/{run_id}/budget"): (
        200,
        {
            "run_id": "r",
            "status": "running",
            "hold_reason": None,
            "budget": {"tokens": 1000},
            "usage": {"tokens": 10, "cost": 0.0, "counters": {}, "messages": 4, "wall_s": 1.5},
        },
    ),
    ("GET", "/v1/runs/{run_id}/events"): (
        200,
        sse(
            ("cue", {"cue": "CUE-1", "state": "go", "at": None}),
            ("run", {"status": "success", "at": None}),
        ),
    ),
    ("GET", "/v1/runs/{run_id}/context"): (
        200,
        {
            "run_id": RUN,
            "count": 1,
            "entries": {"build_id": {"value": "b-1", "source": "a", "tags": [], "metadata": {}}},
        },
    ),
    ("GET", "/v1/agents"): (
        200,
        {
            "count": 1,
            "data": [
                {
                    "agent": "a",
                    "kind": "echo",
                    "contract": {"requires": [], "provides": ["x"]},
                    "online": True,
                    "last_seen": None,
                    "replicas": [
                        {
                            "replica": "r1",
                            "online": True,
                            "idle_ms": 1,
                            "pending": 0,
                            "last_seen": None,
                        }
                    ],
                }
            ],
        },
    ),
    ("GET", "/v1/agents/{agent}/card"): (
        200,
        {
            "name": "specialist-build",
            "description": "builds",
            "skills": [{"id": "implemented_code", "description": "provides implemented_code"}],
        },
    ),
    ("GET", "/v1/escalations"): (200, {"data": [ESCALATION], "count": 1}),
    ("POST", "/v1/escalations/{esc_id}/resolve"): (200, {**ESCALATION, "status": "resolved"}),
    ("POST", "/v1/broadcasts"): (202, {"sent": "1-0"}),
    ("GET", "/v1/wiring"): (
        200,
        {
            "agents": [],
            "message_types": [],
            "cuelists": [],
            "context_keys": [
                {"key": "x", "provided_by": ["a"], "required_by": [], "unprovided": False}
            ],
            "edges": [
                {
                    "from": "a",
                    "to": "b",
                    "kind": "handoff",
                    "via": "demo/CUE-1",
                    "types": ["task.handoff"],
                    "context_keys": ["x"],
                }
            ],
        },
    ),
    ("GET", "/v1/deadletters"): (200, {"data": [], "count": 0, "next": None}),
}


class FakeHub:
    """Answers as ANSWERS says (tests may override one), records (method, route, request)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, httpx.Request]] = []
        self.answers = dict(ANSWERS)

    def routes(self) -> list[tuple[str, str | None]]:
        return [(m, t) for m, t, _ in self.calls]

    def handle(self, request: httpx.Request) -> httpx.Response:
        route = template(request.method, request.url.path)
        self.calls.append((request.method, route, request))
        if route is None:
            return httpx.Response(404, json={"detail": f"no route {request.url.path}"})
        status, body = self.answers[(request.method, route)]
        if isinstance(body, str):
            kind = "text/event-stream" if route.endswith("/events") else "text/plain"
            return httpx.Response(status, text=body, headers={"content-type": kind})
        return httpx.Response(status, json=body)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeHub:
    """A FakeHub the CLI talks to (as http://hub.test), with no profile, key or URL of the
    environment's in the way."""
    hub = FakeHub()
    monkeypatch.setattr(api, "TRANSPORT", hub.transport)
    for name in ("CALLBOARD_PROFILE", "CALLBOARD_API_KEY", "CALLBOARD_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CALLBOARD_URL", "http://hub.test")
    monkeypatch.setenv("CALLBOARD_CONFIG", str(tmp_path / "no-profiles.toml"))
    return hub
