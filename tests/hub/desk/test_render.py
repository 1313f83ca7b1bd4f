"""The desk's template helpers: which routes the hub has (so a button shows only when its
route exists), and the formats of times and ids."""

from __future__ import annotations

import re
from pathlib import Path

from hub.api import create_app
from hub.api.schemas import ts
from hub.desk import render
from hub.desk.data import Approval, Inbox, operator_needs
from hub.engine.state import CueRun, RunState
from hub.service import Hub, HubSettings
from protocols.cuelist import Budget
from protocols.payloads import Usage
from protocols.states import CueState
from protocols.validation import load_cuelist


def test_the_desk_sees_the_routes_of_included_routers() -> None:
    app = create_app(Hub(HubSettings(redis_url="redis://127.0.0.1:1/0")), run_hub=False)
    routes = render.routes_of(app)
    assert ("POST", "/v1/runs/{run_id}/cues/{cue_id}/go") in routes
    assert ("POST", "/v1/escalations/{esc_id}/resolve") in routes
    assert ("GET", "/runs/{run_id}") in routes  # the desk's own pages
    assert ("POST", "/v1/runs/{run_id}/nonsense") not in routes
    assert render.routes_of(app) is routes  # read once


def test_formats() -> None:
    assert render.clock(0.5) == "00:00:00.500"
    assert render.iso(0) == "1970-01-01T00:00:00.000Z"
    assert render.clock(None) == render.when(None) == ""
    assert render.tail("01a20702-b5f2-7000-8000-0123456789ab") == "…456789ab"
    assert render.tail("short") == "short"
    assert render.compact({"b": 1, "a": "x" * 300}, 20).endswith("…")
    assert len(render.compact({"a": "x" * 300}, 20)) == 20
    assert render.seconds(1.0, 1.25) == "250 ms" and render.seconds(0, 2) == "2.00 s"


# 0001-01-01T00:00:00+14:00, an agent's valid sent_at, is before year 1 in UTC; then times
# past 9999, past what the platform's time_t holds, and not finite
NO_DATE = [-62135647200.0, 253402300800.0, 1e20, float("nan"), float("inf")]


def test_a_time_the_calendar_cannot_hold_is_shown_as_its_number() -> None:
    for epoch in NO_DATE:
        assert render.clock(epoch) == render.iso(epoch) == render.when(epoch) == str(epoch)
        assert ts(epoch) is None  # the API's fields are RFC 3339 or null: clients parse them
    assert render.when(-62135596800.0) == "0001-01-01 00:00:00"  # the first day still is one
    assert ts(1.5) == "1970-01-01T00:00:01.500000Z" and ts(None) is None


def test_ids_that_are_not_strings_are_shown_as_text() -> None:
    """A dead letter's envelope is what an agent sent: its run_id may be a number."""
    assert render.tail(12345) == "12345" and render.short(12345, 3) == "123"
    assert render.tail(1234567890123) == "…67890123"
    assert render.tail(None) == render.short(None) == ""


def test_a_condition_is_one_segment_of_its_buttons_url() -> None:
    """A condition's name may hold "/": the "Raise" button's URL encodes it, so a name like
    x/../../rerun stays a name and is not read by the browser as a path to another route."""
    run = RunState(run_id="r1", cuelist="c", version="v", created_at=1.0, started_at=1.0)
    approvals = [Approval(run=run, condition="x/../../rerun", cues=["A"])]
    html = render.ENV.get_template("_needs.html").render(
        run=run, live=True, approvals=approvals, open_escalations=[]
    )
    assert 'data-url="/v1/runs/r1/conditions/x%2F..%2F..%2Frerun"' in html
    assert "/conditions/x/" not in html
    # the board's inbox too: its button sent the browser to POST /v1/runs/r1/rerun
    # (a review found "approval/../../cancel" cancelling the run it was asked to approve)
    board = render.ENV.get_template("_inbox.html").render(inbox=Inbox(approvals=approvals))
    assert 'data-url="/v1/runs/r1/conditions/x%2F..%2F..%2Frerun"' in board
    assert "/conditions/x/" not in board


TEMPLATES = Path(render.__file__).parent / "templates"
ACTION = re.compile(r'\baction\(.*?, "(GET|POST|PUT|PATCH|DELETE)", "([^"]*)"')


def test_the_desk_has_no_write_path_of_its_own() -> None:
    """Issue 15: every button goes through the REST routes the CLI uses; the desk's own
    routes only read, but for its login form. (/mcp is the MCP server: its tools call the
    REST routes' own functions.)"""
    app = create_app(Hub(HubSettings(redis_url="redis://127.0.0.1:1/0")), run_hub=False)
    writes = {
        (method, path) for method, path in render.routes_of(app)
        if method not in ("GET", "HEAD") and not path.startswith(("/v1/", "/mcp"))
    }  # fmt: skip
    assert writes == {("POST", "/login"), ("POST", "/logout")}
    calls = []
    for template in sorted(TEMPLATES.glob("*.html")):
        for line in template.read_text().splitlines():
            if "action(" in line and "macro action" not in line and "{#" not in line:
                found = ACTION.findall(line)
                assert found, f"{template.name}: an action() this test cannot read: {line}"
                calls += found
    assert len(calls) >= 10
    assert [(m, url) for m, url in calls if not url.startswith("/v1/")] == []


def test_the_run_head_shows_what_the_budget_has_used() -> None:
    budget = Budget(tokens=50_000, cost=2.0, wall_s=3600, counters={"api_calls": 5})
    usage = Usage(tokens=50_112, cost=0.25, counters={"api_calls": 2})
    run = RunState(
        run_id="r1", cuelist="c", version="v", created_at=1.0, started_at=1.0,
        completed_at=62.4, budget=budget, usage=usage,
    )  # fmt: skip
    assert render.spend(run) == [
        ("tokens", "50,112", "50,000"), ("cost", "0.25", "2"), ("wall_s", "61", "3,600"),
        ("counters.api_calls", "2", "5"),
    ]  # fmt: skip
    html = render.ENV.get_template("_runhead.html").render(
        run=run, live=False, can=lambda method, path: False, cue_states=[]
    )
    assert "<span>tokens 50,112 / 50,000</span>" in html
    assert render.spend(run.model_copy(update={"budget": None})) == []


def test_the_approvals_asked_are_the_flags_only_an_operator_can_raise() -> None:
    """The desk asked for a flag only when no cue raised it: a flag only the waiting cue or
    those after it raise, or whose raiser has failed, held the run (its hold_reason said
    so) and no button raised it."""
    text = (
        "cuelist: asked\ncues:\n"
        "  - {id: A, target_agents: [a], raises: [built]}\n"
        "  - {id: B, target_agents: [b], depends_on: [A], conditions: [checked, built, ok]}\n"
        "  - {id: C, target_agents: [c], depends_on: [B], raises: [checked]}\n"
        "  - {id: D, target_agents: [d], conditions: [ok]}\n"
        "  - {id: E, target_agents: [e], raises: [ok]}\n"
    )
    cuelist, version = load_cuelist(text)
    run = RunState(run_id="r", cuelist="asked", version=version, created_at=0.0)
    run.cues = {c.id: CueRun() for c in cuelist.cues}
    assert operator_needs(cuelist, run) == {"checked": ["B"]}  # A and E may still raise theirs
    run.cues["A"].state = CueState.FAILED  # `built` will never come from A now
    run.cues["E"].state = CueState.COMPLETED  # nor `ok` from E
    assert operator_needs(cuelist, run) == {"checked": ["B"], "built": ["B"], "ok": ["B", "D"]}
    run.conditions = ["checked"]
    assert "checked" not in operator_needs(cuelist, run)
