"""Row 11: API fuzzing with schemathesis against the hub's OpenAPI schema, on a live hub on
loopback: the default checks (no 500, responses match the schema, status codes and content
types documented, bad input refused...), 100 examples per operation, most of them aimed at
real cuelists, runs, cues and a condition (else nearly every run route only answers 404);
and every protected route answers 401 without the key or with a wrong one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import Procs, child_env
from tests.faults.conftest import Figure

pytestmark = pytest.mark.slow

KEY = "faults-fuzz-key-0123456789"
# CALLBOARD_FUZZ_EXAMPLES scales the run (the full size is 100 per operation).
EXAMPLES = int(os.environ.get("CALLBOARD_FUZZ_EXAMPLES", "100"))
PUBLIC = {"/healthz"}
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture
def hub(redis_server: EmbeddedServer, tmp_path: Path) -> Iterator[str]:
    # event streams of runs that never end (no specialists here) close after 1 s, under
    # schemathesis's 20 s request timeout; clients resume them with Last-Event-ID
    env = child_env(redis_server, CALLBOARD_API_KEY=KEY, CALLBOARD_SSE_MAX_S="1")
    procs = Procs(env, tmp_path)
    try:
        yield procs.hub()
    finally:
        procs.stop()


# What the fuzzer is given to reach past 404: cuelists, runs in them, their cues and their
# condition. No agent is online, so a run's cues wait: a direct manual cue armed for its
# GO, a direct cue for its condition, and budgets to raise.
CUELIST = {
    "cuelist": "fuzz-target",
    "defaults": {"coordination": "direct"},
    "cues": [
        {"id": "CUE-1", "target_agents": ["fuzz-agent"], "manual": True},
        {"id": "CUE-2", "target_agents": ["fuzz-agent"], "conditions": ["approval"]},
    ],
    "budget": {"tokens": 1000, "messages": 100},
}
REAL = 0.8  # how often a path parameter is one of them rather than made up
RUNS = 6


def _realistic(hub: str, tmp_path: Path) -> Path:
    """Start what the fuzzer is pointed at, and write the row's settings with it: the ids
    drawn from with probability REAL. An event stream is given a real run a tenth of the
    time (each holds its request for CALLBOARD_SSE_MAX_S)."""
    auth = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=hub, headers=auth, timeout=10) as api:
        for name in ("fuzz-target", "fuzz-spare"):
            r = api.post("/v1/cuelists", json={**CUELIST, "cuelist": name})
            assert r.status_code == 201, r.text
        runs = []
        for _ in range(RUNS):
            r = api.post("/v1/runs", json={"cuelist": "fuzz-target"})
            assert r.status_code == 201, r.text
            runs.append(r.json()["run_id"])
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        CONFIG.read_text()
        + f"""
[dictionaries.runs]
values = {json.dumps(runs)}

[dictionaries.cues]
values = ["CUE-1", "CUE-2"]

[dictionaries.names]
values = ["fuzz-target", "fuzz-spare", "approval"]

[parameters]
"path.run_id" = {{ dictionary = "runs", probability = {REAL} }}
"path.cue_id" = {{ dictionary = "cues", probability = {REAL} }}
"path.name" = {{ dictionary = "names", probability = {REAL} }}
"body.cuelist" = {{ dictionary = "names", probability = 0.5 }}

[[operations]]
include-name = "GET /v1/runs/{{run_id}}/events"
parameters = {{ "path.run_id" = {{ dictionary = "runs", probability = 0.1 }} }}
"""
    )
    return config


def _schemathesis(url: str, tmp_path: Path) -> tuple[int, str, dict[str, object]]:
    report = tmp_path / "report.json"
    # one worker: with two, hypothesis parsed lambdas' source in two threads at once and
    # CPython 3.11 raised "AST constructor recursion depth mismatch" (cpython gh-106905) in
    # 2 of 5 CI runs
    argv = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(_realistic(url, tmp_path)),
        "run", f"{url}/openapi.json",
        "--max-examples", str(EXAMPLES), "--seed", "1", "--generation-database", "none",
        "--header", f"Authorization: Bearer {KEY}", "--no-color", "--workers", "1",
        "--report", "json", "--report-json-path", str(report), "--request-timeout", "20",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    data = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, done.stdout + done.stderr, data


def test_api_fuzzing_and_auth(hub: str, tmp_path: Path, figure: Figure) -> None:
    paths = httpx.get(f"{hub}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    operations = [
        (method.upper(), path)
        for path, item in paths["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    ]
    unauthorized: list[tuple[str, str, int]] = []
    checked = 0
    for method, path in operations:
        if path in PUBLIC:
            continue
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
            checked += 1
            code = httpx.request(method, f"{hub}{concrete}", headers=header, timeout=10).status_code
            if code != 401:
                unauthorized.append((method, path, code))
    code, output, _ = _schemathesis(hub, tmp_path)
    summary = output[output.rfind("SUMMARY") :] if "SUMMARY" in output else output[-3000:]
    cases = re.search(r"(\d+) generated", summary)
    failures = re.findall(r"❌ (ST\d+ [^:]+): (\d+)", summary)
    server_errors = sum(int(n) for kind, n in failures if "Server error" in kind)
    figure(
        row=11,
        fault=f"schemathesis, default checks, {EXAMPLES} examples per operation, "
        f"{len(operations)} operations, real cuelists, runs, cues and a condition in "
        f"{REAL:.0%} of the path parameters; requests without / with a wrong key",
        promise="no 500; every response matches the schema; every protected route 401",
        measured=f"{cases.group(1) if cases else '?'} cases: "
        + (", ".join(f"{kind} x{n}" for kind, n in failures) or "no failures")
        + f"; 500s: {server_errors}; 401 on {checked - len(unauthorized)}/{checked} "
        "unauthenticated requests",
    )
    assert unauthorized == []
    # what went wrong, as schemathesis tells it: its ERRORS and FAILURES sections, then the
    # summary (an error's own lines name the operation and the exception)
    told = re.search(r"^=+ (ERRORS|FAILURES) =+$", output, re.MULTILINE)
    assert code == 0, output[told.start() :] if told else summary
