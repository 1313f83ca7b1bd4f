"""Fixtures of the fault suite: the figure each row records, and per-test process groups.

Every test records its measured figure with `figure(...)`; when CALLBOARD_RELIABILITY_OUT
names a file, one JSON line per row is appended to it at teardown, with `passed` taken
from the test's own outcome (scripts/reliability.py turns the lines into RELIABILITY.md).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from tests.e2e.procs import Procs, child_env

OUT_ENV = "CALLBOARD_RELIABILITY_OUT"
Figure = Callable[..., None]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Iterator[Figure]:
    """`figure(row=1, fault=..., measured=..., promise=...)`; later calls update the row."""
    row: dict[str, Any] = {}
    began = time.time()

    def record(**fields: Any) -> None:
        row.update(fields)

    yield record
    out = os.environ.get(OUT_ENV)
    if not out or not row:
        return
    reports = [getattr(request.node, f"rep_{when}", None) for when in ("setup", "call")]
    row["passed"] = all(r is not None and r.passed for r in reports)
    row["test"] = request.node.nodeid
    row["began"], row["ended"] = began, time.time()  # the suite's span, for rows kept apart
    with open(out, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=str) + "\n")


Server = EmbeddedServer | EmbeddedCluster
ON_BOTH = pytest.mark.parametrize("server", ["single", "cluster"], indirect=True)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Server:
    """The session's one server; the 3-master cluster for a row marked `ON_BOTH` (its
    cluster variant)."""
    kind = getattr(request, "param", "single")
    name = "redis_cluster" if kind == "cluster" else "redis_server"
    found: Server = request.getfixturevalue(name)
    return found


@pytest.fixture
def procs(server: Server, tmp_path: Path) -> Iterator[Procs]:
    """Processes on `server` under a fresh key prefix; all stopped afterwards."""
    env = child_env(server, CALLBOARD_MIN_IDLE_MS="1000", CALLBOARD_LEASE_MS="1500")
    group = Procs(env, tmp_path)
    try:
        yield group
    finally:
        group.stop()
