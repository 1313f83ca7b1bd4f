"""What the CLI makes of answers that are not a plain success: a page that is not the
hub's API, a command sent but never answered, hub text holding brackets, a winner given as
a run-id prefix."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from callboard import client as cli_client
from callboard.cli import app
from callboard.commands import api
from callboard.commands.routes import RUN
from tests.cli_fake_hub import ESCALATION, SUMMARY, FakeHub, installed, run_body, sse

RUN_OTHER = "0190a3b4-5c6d-7e8f-9a0b-ffffffffffff"
PAGE = "<html><body>Sign in to continue</body></html>"
KEYED = [  # every command that changes state, with the route it posts to
    ["cancel", RUN],
    ["go", RUN, "CUE-1"],
    ["retry", RUN, "CUE-1"],
    ["rerun", RUN],
    ["condition", RUN, "approval_received"],
    ["budget", RUN, "--tokens", "5"],
    ["escalations", "resolve", ESCALATION["id"]],
    ["broadcast", "pause"],
    ["run", "demo"],
]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeHub:
    monkeypatch.setattr(cli_client, "WAIT_S", 0.0)
    return installed(monkeypatch, tmp_path)


def invoke(argv: list[str]) -> object:
    return CliRunner().invoke(app, argv)


def answer_all(monkeypatch: pytest.MonkeyPatch, status: int, text: str = PAGE) -> None:
    page = httpx.Response(status, text=text, headers={"content-type": "text/html"})
    monkeypatch.setattr(api, "TRANSPORT", httpx.MockTransport(lambda _: page))


@pytest.mark.parametrize(
    "argv",
    [*KEYED, ["cuelists", "delete", "demo"], ["runs"], ["agents"], ["health"], ["metrics"]],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_page_that_is_not_the_api_is_a_one_line_error_never_a_success(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    answer_all(monkeypatch, 200)
    for output in ("json", "table"):
        result = CliRunner().invoke(app, [*argv, "-o", output])
        assert result.exit_code == 2, (output, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert result.stdout == ""  # no {"detail": "<html>..."} passed off as the answer
        assert result.stderr.count("\n") == 1 and "not the hub's API" in result.stderr


def test_json_without_the_routes_fields_and_a_proxys_503_are_errors(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.answers[("POST", "/v1/runs/{run_id}/cues/{cue_id}/go")] = (200, {"detail": "hi"})
    result = CliRunner().invoke(app, ["go", RUN, "CUE-1"])  # a KeyError traceback before
    assert result.exit_code == 2 and "lacks state, attempt" in result.stderr
    answer_all(monkeypatch, 503, "<html>503 Service Unavailable</html>")
    result = CliRunner().invoke(app, ["health", "-o", "json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "refused (503): Service Unavailable (a text/html page" in result.stderr


def test_a_command_sent_and_never_answered_says_unknown_and_the_key(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str] = []

    def slow(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return fake.handle(request)
        keys.append(request.headers["idempotency-key"])  # the hub did it; the answer is late
        raise httpx.ReadTimeout("timed out", request=request)

    monkeypatch.setattr(api, "TRANSPORT", httpx.MockTransport(slow))
    result = CliRunner().invoke(app, ["cancel", RUN])
    assert result.exit_code == 2 and "no hub" not in result.stderr
    assert len(set(keys)) == 1  # one key for the invocation, kept across its own retries
    assert "unknown" in result.stderr and f"--idempotency-key {keys[0]}" in result.stderr
    keys.clear()
    result = CliRunner().invoke(app, ["cancel", RUN, "--idempotency-key", "k-1"])
    assert "--idempotency-key k-1" in result.stderr and set(keys) == {"k-1"}


@pytest.mark.parametrize("argv", KEYED, ids=lambda a: " ".join(a[:2]))
def test_every_command_that_changes_state_takes_its_key(fake: FakeHub, argv: list[str]) -> None:
    result = invoke([*argv, "--idempotency-key", "op-7"])
    assert result.exit_code == 0, result.output
    posted = [r for m, _, r in fake.calls if m == "POST"]
    assert [r.headers["idempotency-key"] for r in posted] == ["op-7"]


def test_hub_text_is_never_read_as_markup(fake: FakeHub, tmp_path: Path) -> None:
    detail = "no cue waits for 'approvd'; it waits for [approved] (did you mean approved?)"
    fake.answers[("POST", "/v1/runs/{run_id}/conditions/{name}")] = (422, {"detail": detail})
    result = invoke(["condition", RUN, "approvd"])
    assert result.exit_code == 1 and detail in result.stderr
    odd = "build failed: see [/var/log/build.log] [bold]x[/]"
    fake.answers[("GET", "/v1/escalations")] = (200, {"data": [{**ESCALATION, "detail": odd}]})
    result = invoke(["escalations"])
    assert result.exit_code == 0 and odd in result.stdout  # a MarkupError before
    failed = ("cue", {"cue": "CUE-1", "state": "failed", "error": "exit 2 [/bin/sh]"})
    fake.answers[("GET", "/v1/runs/{run_id}/events")] = (
        200,
        sse(failed, ("run", {"status": "failed"})),
    )
    fake.answers[("GET", "/v1/runs/{run_id}")] = (200, run_body("failed"))
    result = invoke(["events", RUN])
    assert result.exit_code == 0 and "[/bin/sh]" in result.stdout
    cuelist = tmp_path / "c.yaml"
    cuelist.write_text("cuelist: demo\n")
    issue = {"code": "duplicate_id", "message": "CUE-1 twice", "cue": "CUE-1", "line": 4}
    fake.answers[("POST", "/v1/cuelists")] = (422, {"detail": "invalid", "errors": [issue]})
    result = invoke(["submit", str(cuelist)])
    assert result.exit_code == 1 and "- [duplicate_id] CUE-1 twice" in result.stderr
    report = {"valid": False, "name": "demo", "errors": [{**issue, "code": "no_target"}]}
    fake.answers[("POST", "/v1/cuelists/validate")] = (200, report)
    result = invoke(["submit", "--check", str(cuelist)])
    assert result.exit_code == 1 and "error [no_target] CUE-1 twice" in result.stdout


def test_a_winner_named_by_a_run_id_prefix_is_sent_whole(fake: FakeHub) -> None:
    other = {**SUMMARY, "run_id": RUN_OTHER}
    fake.answers[("GET", "/v1/runs")] = (200, {"data": [SUMMARY, other]})
    result = invoke(
        ["escalations", "resolve", ESCALATION["id"][:23], "--winner", f"{RUN[:25]}/CUE-2"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(fake.calls[-1][2].content) == {"winner": f"{RUN}/CUE-2"}
    assert invoke(["escalations", "resolve", ESCALATION["id"], "--winner", "CUE-2"]).exit_code == 0
    assert json.loads(fake.calls[-1][2].content) == {"winner": "CUE-2"}  # a cue id as typed
    result = invoke(["escalations", "resolve", ESCALATION["id"], "--winner", "0190a3b4/CUE-2"])
    assert result.exit_code == 2 and "ambiguous" in result.stderr
    assert fake.calls[-1][0] == "GET"  # nothing was resolved with an ambiguous winner
