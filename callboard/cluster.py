"""The processes `callboard up` starts and the checks that keep it to its own hub.

`up` refuses a port something already listens on (before starting anything), gives its
hub an id of its own (CALLBOARD_HUB_ID) and talks to the port only once /healthz answers
with that id, so a second `up` can never drive the first one's hub. Its data folder
(the embedded server's AOF and every log) is locked while it runs, so two `up`s never
share one server's files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from callboard.client import ApiError, BadAnswer, Client, Unreachable
from callboard.embedded import EmbeddedServer

STOP_TIMEOUT_S = 10.0
RESERVED_LOG_NAMES = ("hub", "up")


class UpError(Exception):
    """`up` cannot go on; the message says why and what to do."""


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Does something listen on host:port? Checked as uvicorn binds (SO_REUSEADDR), so a
    port left in TIME_WAIT by a stopped hub counts as free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def log_name(agent: str) -> str:
    """A specialist's log file: `specialist-build.log` for specialist-build (not
    `specialist-specialist-build.log`); an agent called `hub` does not take the hub's."""
    return f"specialist-{agent}" if agent in RESERVED_LOG_NAMES else agent


class DataDir:
    """The folder `up` keeps its state in: `redis/` (the embedded server's AOF) and
    `logs/`. Held under an exclusive lock while `up` runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.redis = root / "redis"
        self.logs = root / "logs"
        self._lock: IO[str] | None = None

    def lock(self) -> DataDir:
        self.redis.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        handle = open(self.root / "up.lock", "a+")  # noqa: SIM115 - held until unlock()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise UpError(
                f"{self.root} is in use by another callboard up (pid {holder}); stop it, "
                "or give this one its own folder with --data DIR"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock = handle
        return self

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing releases the flock
            self._lock = None


class Cluster:
    """The processes `up` started, stopped in reverse order, then the server."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.server: EmbeddedServer | None = None

    def spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(
            argv, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.procs.append((name, proc))
        return proc

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs if proc.poll() is not None]

    def log_tail(self, name: str, lines: int = 5) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            text = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if self.server is not None:
            self.server.close()
            self.server = None


def wait_for_own_hub(
    client: Client, hub_id: str, alive: Callable[[], bool], timeout_s: float
) -> None:
    """Wait until the port answers as the hub `up` started (its /healthz `hub_id`) and
    is healthy; anything else answering there is refused, never driven."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not alive():
            raise UpError("the hub exited while starting")
        with contextlib.suppress(Unreachable):
            status, body = _health(client)
            if status is None:
                raise UpError(
                    f"something that is not a callboard hub answers at {client.url}; "
                    "nothing was sent to it"
                )
            if body.get("hub_id") != hub_id:
                raise UpError(
                    f"{client.url} answers as hub {body.get('hub_id')!r}, not the hub this "
                    "`up` started: another hub took the port; nothing was sent to it"
                )
            if status == 200:
                return
        if time.monotonic() > deadline:
            raise UpError(f"the hub did not answer at {client.url} within {timeout_s:.0f} s")
        time.sleep(0.1)


def _health(client: Client) -> tuple[int | None, dict[str, object]]:
    """(status, body) of /healthz; (None, {}) when what answers is no callboard hub."""
    try:
        status, body = client.health()
    except (ApiError, BadAnswer, ValueError):
        return None, {}
    return (status, body) if "hub_id" in body else (None, {})
