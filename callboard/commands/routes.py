"""Every route of the hub's API and the CLI command that calls it, so an operator never
needs curl. tests/test_cli_routes.py checks that every route the hub serves is here and
that each command, run against a stand-in hub, calls exactly its route.

Each row: method, path (as FastAPI spells it) and an example command line.
"""

from __future__ import annotations

RUN = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
ESC = "0190a3b4-5c6d-7e8f-9a0b-aaaaaaaaaaaa"

ROUTES: list[tuple[str, str, list[str]]] = [
    ("GET", "/healthz", ["health"]),
    ("GET", "/metrics", ["metrics"]),
    ("POST", "/v1/cuelists", ["submit", "FILE"]),
    ("POST", "/v1/cuelists/validate", ["submit", "--check", "FILE"]),
    ("GET", "/v1/cuelists", ["cuelists"]),
    ("GET", "/v1/cuelists/{name}", ["cuelists", "show", "demo"]),
    ("DELETE", "/v1/cuelists/{name}", ["cuelists", "delete", "demo"]),
    ("POST", "/v1/cuelists/{name}/schedule/pause", ["cuelists", "schedule", "pause", "demo"]),
    ("POST", "/v1/cuelists/{name}/schedule/resume", ["cuelists", "schedule", "resume", "demo"]),
    ("POST", "/v1/runs", ["run", "demo"]),
    ("GET", "/v1/runs", ["runs"]),
    ("GET", "/v1/runs/{run_id}", ["status", RUN]),
    ("POST", "/v1/runs/{run_id}/cues/{cue_id}/go", ["go", RUN, "CUE-1"]),
    ("POST", "/v1/runs/{run_id}/cues/{cue_id}/retry", ["retry", RUN, "CUE-1"]),
    ("POST", "/v1/runs/{run_id}/rerun", ["rerun", RUN, "--from-failure"]),
    ("POST", "/v1/runs/{run_id}/conditions/{name}", ["condition", RUN, "approval_received"]),
    ("POST", "/v1/runs/{run_id}/cancel", ["cancel", RUN]),
    ("POST", "/v1/runs/{run_id}/budget", ["budget", RUN, "--tokens", "1000"]),
    ("GET", "/v1/runs/{run_id}/events", ["events", RUN]),
    ("GET", "/v1/runs/{run_id}/context", ["context", RUN]),
    ("GET", "/v1/agents", ["agents"]),
    ("GET", "/v1/agents/{agent}/card", ["card", "specialist-build"]),
    ("GET", "/v1/escalations", ["escalations"]),
    ("POST", "/v1/escalations/{esc_id}/resolve", ["escalations", "resolve", ESC]),
    ("POST", "/v1/broadcasts", ["broadcast", "notice", "--message", "hello"]),
    ("GET", "/v1/wiring", ["wiring"]),
    ("GET", "/v1/deadletters", ["deadletters"]),
]

# Served by the hub, but not API actions: the documentation pages, the web desk's pages
# (HTML for people, from the modules of hub.desk; the desk itself acts through /v1), and
# the A2A agent card and the MCP endpoint (for A2A clients and assistants; /a2a is a mount).
NOT_ACTIONS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json")
NOT_ACTION_MODULES = ("hub.desk", "hub.a2a", "hub.mcp")
