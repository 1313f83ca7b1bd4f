"""The desk's template helpers: which routes the hub has (so a button shows only when its
route exists), and the formats of times and ids."""

from __future__ import annotations

from hub.api import create_app
from hub.desk import render
from hub.service import Hub, HubSettings


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
