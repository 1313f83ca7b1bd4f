"""`callboard conformance --agent NAME [-- COMMAND...]`: check a specialist, in any language,
against PROTOCOL.md on a real server; exit 0 all passed, 1 some failed, 2 cannot run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer

from callboard.conformance.kit import Exited, Report, Unusable, run_kit
from callboard.conformance.stage import Timing
from protocols.keys import DEFAULT_PREFIX

PASSED, FAILED, UNUSABLE = 0, 1, 2


def conformance(
    agent: Annotated[str, typer.Option("--agent", help="the agent id to check")],
    command: Annotated[
        list[str] | None,
        typer.Argument(help="after --: start this command as the agent, stop it at the end"),
    ] = None,
    redis_url: Annotated[
        str, typer.Option("--redis-url", envvar="REDIS_URL", help="the server to use")
    ] = "redis://127.0.0.1:6379/0",
    prefix: Annotated[
        str, typer.Option("--prefix", envvar="CALLBOARD_PREFIX", help="a prefix no hub uses")
    ] = DEFAULT_PREFIX,
    output: Annotated[str, typer.Option("-o", "--output", help="json or table")] = "table",
    only: Annotated[
        list[str] | None, typer.Option("--only", help="run only this check (repeatable)")
    ] = None,
    ack_timeout_s: Annotated[float, typer.Option("--ack-timeout-s", min=0.1)] = 5.0,
    settle_ms: Annotated[
        int, typer.Option("--settle-ms", min=0, help="watch this long for what must not come")
    ] = 1000,
    start_timeout_s: Annotated[float, typer.Option("--start-timeout-s", min=0.1)] = 30.0,
    agent_log: Annotated[
        Path | None, typer.Option("--agent-log", help="the started command's output (stderr)")
    ] = None,
) -> None:
    """Drive a specialist through the protocol as the hub would and report each behaviour."""
    if output not in ("json", "table"):
        typer.echo(f"error: -o takes json or table, not {output!r}", err=True)
        raise typer.Exit(UNUSABLE)
    timing = Timing(
        ack_timeout_s=ack_timeout_s, settle_s=settle_ms / 1000, start_timeout_s=start_timeout_s
    )
    env = {**os.environ, "REDIS_URL": redis_url, "CALLBOARD_PREFIX": prefix}
    env["CALLBOARD_AGENT"] = agent
    with _launched(command or [], env, agent_log) as start:
        try:
            report = asyncio.run(
                run_kit(redis_url, agent, prefix=prefix, timing=timing, only=only, start=start)
            )
        except Unusable as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(UNUSABLE) from None
    if output == "json":
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        typer.echo(table(report))
    raise typer.Exit(PASSED if report.passed else FAILED)


def table(report: Report) -> str:
    lines = [f"conformance of agent {report.agent} (prefix {report.prefix})"]
    width = max(len(r.check) for r in report.results)
    for r in report.results:
        mark = "PASS" if r.passed else "FAIL"
        lines.append(f"{mark}  {r.check:<{width}}  {r.seconds:6.2f}s  {r.detail}")
    good = sum(r.passed for r in report.results)
    lines.append(f"{good} of {len(report.results)} behaviours hold")
    return "\n".join(lines)


@contextlib.contextmanager
def _launched(
    command: list[str], env: dict[str, str], log: Path | None
) -> Iterator[Callable[[], Exited] | None]:
    """A `start` coroutine function that runs `command`, which is stopped on the way out."""
    if not command:
        yield None
        return
    procs: list[subprocess.Popen[bytes]] = []
    sink = open(log, "ab") if log is not None else None  # noqa: SIM115 - closed below

    def start() -> Exited:
        try:
            proc = subprocess.Popen(
                command, env=env, stdout=sink or sys.stderr, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            raise Unusable(f"cannot start {command[0]}: {exc.strerror or exc}") from None
        procs.append(proc)
        return proc.poll

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if sink is not None:
            sink.close()
