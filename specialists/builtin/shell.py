"""The `shell` specialist: run the cue's `action.argv` as a subprocess, no shell, with a timeout.

Action: `{argv: [...], timeout_s?, cwd?, env?: {NAME: value}}`. Stdout, stderr (their tails,
`output_limit_bytes` each, kept as the output is read: no more is ever held) and the exit
code go to the shared context as `{cue_id}.stdout`, `{cue_id}.stderr`, `{cue_id}.exit_code`,
and to the status result; a non-zero exit fails the cue with the exit code and the tail of
stderr.

The command runs in a process group of its own, killed when the command exits, times out
or is stood down: nothing it started in the background outlives its cue (or holds its
output open). A guard process leads the group (`shell_guard.py`) and kills it when the
replica itself is killed (SIGKILL, the OOM killer): the command does not run on beside the
copy of its GO another replica is given. Only what leaves the group (`setsid`) escapes;
its output is then not waited for past OUTPUT_GRACE_S after the command exits, nor past
the timeout. It gets the replica's environment less the replica's own credentials
(`REDIS_URL` and every `CALLBOARD_*` variable: its output is published in the run's
context), plus `action.env`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

from specialists.base import Specialist
from specialists.builtin.shell_guard import CANNOT_RUN
from specialists.cue import Cue, Result
from specialists.errors import Reject


class ShellSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_SHELL_", extra="ignore")

    timeout_s: float = 300.0
    max_timeout_s: float = 24 * 3600.0  # the most an action's own timeout_s may be
    output_limit_bytes: int = 16 * 1024  # per stream, the tail is kept


READ_CHUNK = 64 * 1024
OUTPUT_GRACE_S = 1.0  # the command exited, its group killed: what still holds its output left
GUARD = Path(__file__).with_name("shell_guard.py")  # leads the command's process group
OWN = "CALLBOARD_"  # the replica's own settings and credentials: not the command's


class CommandFailed(Exception):
    """The command ran and exited non-zero, or did not finish in time."""


def _environment(extra: object) -> dict[str, str]:
    """The replica's environment less its credentials, and `extra` (action.env) on top."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith(OWN)}
    if isinstance(extra, dict):
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


def _timeout_s(action: dict[str, Any], settings: ShellSettings) -> float:
    """`action.timeout_s`: seconds over 0, at most `max_timeout_s` (else the replica's)."""
    raw, most = action.get("timeout_s"), settings.max_timeout_s
    if raw is None:
        return settings.timeout_s
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw <= most:
        raise Reject(f"action.timeout_s must be a number of seconds over 0 and at most "
                     f"{most:g}, got {raw!r}")  # fmt: skip
    return float(raw)


class _Watched(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's protocol for a subprocess's streams, that tells when the process exits:
    before Python 3.12 `Process.wait()` returns only once every pipe is closed too, which a
    child left in the background keeps open."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def _spawn(
    argv: list[str], **options: Any
) -> tuple[asyncio.subprocess.Process, _Watched, asyncio.SubprocessTransport]:
    """`asyncio.create_subprocess_exec` of the command under its guard (in a session of its
    own, so a process group), its protocol `_Watched` and its transport."""
    loop = asyncio.get_running_loop()
    guarded = [sys.executable, "-I", str(GUARD), str(os.getpid()), *argv]
    transport, protocol = await loop.subprocess_exec(
        lambda: _Watched(limit=READ_CHUNK, loop=loop), *guarded, start_new_session=True,
        **options,
    )  # fmt: skip
    return asyncio.subprocess.Process(transport, protocol, loop), protocol, transport


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kill the command's process group: whatever it left running goes with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _argv(action: dict[str, Any]) -> list[str]:
    argv = action.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise Reject(f"action.argv must be a non-empty list of strings, got {argv!r}")
    return argv


class _Tail:
    """The last `limit` bytes of a command's output stream, read as it comes: a command
    that prints without end costs `limit`, not all it printed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.total = 0

    async def read(self, stream: asyncio.StreamReader | None) -> None:
        while stream is not None and (chunk := await stream.read(READ_CHUNK)):
            self.total += len(chunk)
            self.kept += chunk
            if len(self.kept) > self.limit:
                del self.kept[: len(self.kept) - self.limit]

    def text(self) -> str:
        text = self.kept.decode(errors="replace")
        cut = self.total - len(self.kept)
        return f"[...{cut} bytes cut]{text}" if cut else text


class Shell(Specialist):
    kind = "shell"

    def __init__(self, *args: Any, shell_settings: ShellSettings | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.shell_settings = shell_settings or ShellSettings()

    async def execute(self, cue: Cue) -> Result:
        action = cue.action
        argv = _argv(action)
        timeout_s = _timeout_s(action, self.shell_settings)
        env = _environment(action.get("env"))
        started = time.monotonic()
        try:
            proc, watched, transport = await _spawn(
                argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=action.get("cwd"),
                env=env,
            )
        except OSError as exc:
            raise Reject(f"cannot run {argv[0]!r}: {exc}") from exc
        limit = self.shell_settings.output_limit_bytes
        stdout, stderr = _Tail(limit), _Tail(limit)
        reading = asyncio.gather(stdout.read(proc.stdout), stderr.read(proc.stderr))
        try:
            async with asyncio.timeout(timeout_s):
                await watched.exited.wait()
                # it exited: a child it left in the background would hold its output open
                # (and this cue) until the timeout, and outlive it
                _kill_group(proc)
                with contextlib.suppress(TimeoutError):  # one that left the group holds it
                    await asyncio.wait_for(asyncio.shield(reading), OUTPUT_GRACE_S)
        except TimeoutError:
            raise CommandFailed(f"{argv[0]} timed out after {timeout_s:g}s") from None
        finally:  # timed out, stood down, or the replica is being torn down: the group too
            _kill_group(proc)
            if not watched.exited.is_set():  # killed: it exits now (not `wait()`, which
                await watched.exited.wait()  # waits for the output to end too, before 3.12)
            if not reading.done():
                reading.cancel()
            elif not reading.cancelled():
                reading.exception()  # heard: a read that failed is the outcome's, not a warning
            transport.close()  # the output's pipes, which a process that left may hold
        code = proc.returncode
        out, err = stdout.text(), stderr.text()
        if code == 127 and err.startswith(CANNOT_RUN):
            raise Reject(f"cannot run {argv[0]!r}: {err[len(CANNOT_RUN) :].strip()}")
        for name, value in (("stdout", out), ("stderr", err), ("exit_code", code)):
            cue.put_context(f"{cue.cue_id}.{name}", value, tags=["shell"])
        if code != 0:
            raise CommandFailed(f"exit code {code}: {err[-2000:]}".rstrip(": "))
        duration_s = round(time.monotonic() - started, 3)
        return Result(
            result={"exit_code": code, "stdout": out, "stderr": err, "duration_s": duration_s}
        )
