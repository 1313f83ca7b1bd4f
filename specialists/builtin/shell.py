"""The `shell` specialist: run the cue's `action.argv` as a subprocess, no shell, with a timeout.

Action: `{argv: [...], timeout_s?, cwd?, env?: {NAME: value}}`. Stdout, stderr (their tails,
`output_limit_bytes` each, kept as the output is read: no more is ever held) and the exit
code go to the shared context as `{cue_id}.stdout`, `{cue_id}.stderr`, `{cue_id}.exit_code`,
and to the status result; a non-zero exit fails the cue with the exit code and the tail of
stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

from specialists.base import Specialist
from specialists.cue import Cue, Result
from specialists.errors import Reject


class ShellSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_SHELL_", extra="ignore")

    timeout_s: float = 300.0
    output_limit_bytes: int = 16 * 1024  # per stream, the tail is kept


READ_CHUNK = 64 * 1024


class CommandFailed(Exception):
    """The command ran and exited non-zero, or did not finish in time."""


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
        timeout_s = float(action.get("timeout_s") or self.shell_settings.timeout_s)
        env = None
        if isinstance(action.get("env"), dict):
            env = {**os.environ, **{str(k): str(v) for k, v in action["env"].items()}}
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=action.get("cwd"),
                env=env,
                start_new_session=True,  # so a timeout kills the whole process group
            )
        except OSError as exc:
            raise Reject(f"cannot run {argv[0]!r}: {exc}") from exc
        limit = self.shell_settings.output_limit_bytes
        stdout, stderr = _Tail(limit), _Tail(limit)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(stdout.read(proc.stdout), stderr.read(proc.stderr))
                await proc.wait()
        except TimeoutError:
            raise CommandFailed(f"{argv[0]} timed out after {timeout_s:g}s") from None
        finally:
            if proc.returncode is None:  # timed out, or the replica is being torn down
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        code = proc.returncode
        out, err = stdout.text(), stderr.text()
        for name, value in (("stdout", out), ("stderr", err), ("exit_code", code)):
            cue.put_context(f"{cue.cue_id}.{name}", value, tags=["shell"])
        if code != 0:
            raise CommandFailed(f"exit code {code}: {err[-2000:]}".rstrip(": "))
        duration_s = round(time.monotonic() - started, 3)
        return Result(
            result={"exit_code": code, "stdout": out, "stderr": err, "duration_s": duration_s}
        )
