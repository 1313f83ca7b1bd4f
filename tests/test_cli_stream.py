"""Following a run's events (`events`, `run --watch`) across streams that end early, break
or are refused with 503: every event up to the run's final one is read, the run id is never
lost, and a run still going is never left behind with exit 0."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from callboard import client as cli_client
from callboard.cli import app
from callboard.commands import api, stream
from callboard.commands.routes import RUN
from tests.cli_fake_hub import FakeHub, installed, run_body

STORED = [  # the run's stream on the hub
    ("1-0", "cue", {"cue": "CUE-1", "state": "go"}),
    ("2-0", "cue", {"cue": "CUE-1", "state": "failed", "error": "boom"}),
    ("3-0", "run", {"status": "failed"}),
]
Handler = Callable[[httpx.Request], httpx.Response | None]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeHub:
    monkeypatch.setattr(cli_client, "WAIT_S", 0.0)
    monkeypatch.setattr(stream, "FIRST_WAIT_S", 0.0)
    monkeypatch.setattr(stream, "MAX_WAIT_S", 0.0)
    return installed(monkeypatch, tmp_path)


def serve(fake: FakeHub, handler: Handler) -> None:
    """`handler` answers what it wants to; the fake hub the rest (and records every call)."""

    def answer(request: httpx.Request) -> httpx.Response:
        mine = handler(request)
        if mine is None:
            return fake.handle(request)
        fake.calls.append((request.method, "mine", request))
        return mine

    api.TRANSPORT = httpx.MockTransport(answer)


def events_after(after: str, count: int = len(STORED)) -> httpx.Response:
    rest = [e for e in STORED if e[0] > after][:count]
    text = "".join(f"id: {i}\nevent: {n}\ndata: {json.dumps(d)}\n\n" for i, n, d in rest)
    return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})


def is_events(request: httpx.Request) -> bool:
    return request.url.path.endswith("/events")


def test_events_read_to_the_final_event_when_the_run_ended_meanwhile(fake: FakeHub) -> None:
    opened: list[str] = []
    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body("failed"))  # already over

    def handler(request: httpx.Request) -> httpx.Response | None:
        if not is_events(request):
            return None
        opened.append(request.headers.get("last-event-id", "0-0"))
        return events_after(opened[-1], 1 if len(opened) == 1 else 9)  # the first is cut

    serve(fake, handler)
    result = CliRunner().invoke(app, ["events", RUN, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["1-0", "2-0", "3-0"]
    assert opened == ["0-0", "1-0"]


def test_events_go_on_past_many_short_streams_while_the_run_does(fake: FakeHub) -> None:
    """The hub ends each stream after one event (CALLBOARD_SSE_MAX_S); 150 of them."""
    many = [(f"{i}-0", "cue", {"cue": "CUE-1", "state": "go"}) for i in range(1, 150)]
    stored = [*many, ("150-0", "run", {"status": "success"})]
    checks = iter([*["running"] * (len(stored) - 1), "success"])

    def handler(request: httpx.Request) -> httpx.Response | None:
        if is_events(request):
            after = int(request.headers.get("last-event-id", "0-0").split("-")[0])
            i, n, d = stored[after]
            text = f"id: {i}\nevent: {n}\ndata: {json.dumps(d)}\n\n"
            return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
        if request.url.path == f"/v1/runs/{RUN}":
            return httpx.Response(200, json=run_body(next(checks)))
        return None

    serve(fake, handler)
    result = CliRunner().invoke(app, ["events", RUN, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 150  # not 100 and exit 0 with the run going on


def test_a_503_on_the_stream_is_waited_out_and_the_run_id_is_kept(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(stream.time, "sleep", waits.append)  # the pause asked, not slept
    monkeypatch.setattr(stream, "MAX_WAIT_S", 5.0)
    refusals = iter(range(2))
    checks = iter(["running"] * 4 + ["success"] * 9)

    def handler(request: httpx.Request) -> httpx.Response | None:
        if is_events(request):
            if next(refusals, None) is not None:  # the hub has its most streams open
                body = {"detail": "the hub has 2000 event streams open: try again shortly"}
                return httpx.Response(503, json=body, headers={"Retry-After": "2"})
            return events_after("2-0")
        if request.url.path == f"/v1/runs/{RUN}":
            return httpx.Response(200, json=run_body(next(checks)))
        return None

    serve(fake, handler)
    result = CliRunner().invoke(app, ["run", "demo", "--watch", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "success"
    assert waits == [2.0, 2.0]  # Retry-After, each time


def test_when_following_fails_after_the_start_the_run_id_is_still_printed(
    fake: FakeHub,
) -> None:
    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body("running"))
    fake.answers[("GET", "/v1/runs/{run_id}/events")] = (403, {"detail": "not yours"})
    result = CliRunner().invoke(app, ["run", "demo", "--watch", "-o", "json"])
    assert result.exit_code == 1 and "not yours" in result.stderr
    assert json.loads(result.stdout) == {"run_id": RUN}
    result = CliRunner().invoke(app, ["run", "demo", "--watch"])
    assert result.exit_code == 1 and f"run {RUN}" in result.stdout


def test_a_hub_restarting_is_waited_for_not_a_reason_to_stop(fake: FakeHub) -> None:
    calls = {"events": 0, "run": 0}

    def handler(request: httpx.Request) -> httpx.Response | None:
        if is_events(request):
            calls["events"] += 1
            if calls["events"] == 1:  # the stream breaks: the hub is restarting
                raise httpx.ConnectError("connection refused", request=request)
            return events_after("0-0")
        if request.url.path == f"/v1/runs/{RUN}":
            calls["run"] += 1
            if calls["run"] <= 3:  # and is away for three checks of the run
                raise httpx.ConnectError("connection refused", request=request)
        return None

    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body("failed"))
    serve(fake, handler)
    result = CliRunner().invoke(app, ["events", RUN, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["1-0", "2-0", "3-0"]


def test_a_hub_gone_for_good_ends_the_command_with_exit_2(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "RESTART_S", 0.0)

    def gone(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    serve(fake, gone)
    result = CliRunner().invoke(app, ["events", RUN])
    assert result.exit_code == 2 and "no hub" in result.stderr
