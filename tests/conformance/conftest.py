"""Agents under test as real processes, and the kit run in process against them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from callboard.conformance.kit import Exited
from callboard.embedded import EmbeddedServer
from tests.e2e.procs import Procs, processes

AgentStarter = Callable[..., Callable[[], Exited]]


@pytest.fixture
def procs(env: dict[str, str], tmp_path: Path) -> Iterator[Procs]:
    with processes(env, tmp_path) as started:
        yield started


@pytest.fixture
def raw_agent(procs: Procs) -> AgentStarter:
    """`raw_agent(name, flaw)` -> the kit's `start`: runs tests.conformance.raw_agent."""

    def make(agent: str, flaw: str = "none") -> Callable[[], None]:
        argv = [sys.executable, "-m", "tests.conformance.raw_agent", "--agent", agent]
        return lambda: procs.spawn(f"raw-{flaw}", [*argv, "--flaw", flaw]).poll

    return make


@pytest.fixture
def server(redis_server: EmbeddedServer) -> EmbeddedServer:
    return redis_server
