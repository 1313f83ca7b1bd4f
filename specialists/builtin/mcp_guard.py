"""Between the `mcp` kind and a stdio MCP server, in a process of its own (the standard
library only, run by path): the server's stdout is relayed a whole line at a time, as the
SDK reads a line without a bound. A line past `LIMIT_BYTES` is not read further: the
requests still open are answered with an error saying so, and the server is stopped.

    python -I mcp_guard.py LIMIT_BYTES COMMAND [ARG...]

The server is its child, in the process group the SDK gives the guard (and stops as one),
with the guard's environment and stderr. A command that cannot start is reported the same
way, as the answer to every request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import IO, Any

CHUNK_BYTES = 65536


class Pending:
    """The ids of the client's requests the server has not answered yet."""

    def __init__(self) -> None:
        self.ids: set[int | str] = set()
        self.lock = threading.Lock()

    def note(self, line: bytes, *, sent: bool) -> None:
        """A client's line (`sent`) opens its requests; a server's line closes its answers."""
        found = _ids(line, requests=sent)
        with self.lock:
            if sent:
                self.ids.update(found)
            else:
                self.ids.difference_update(found)

    def take(self) -> list[int | str]:
        with self.lock:
            taken, self.ids = list(self.ids), set()
        return taken


def _ids(line: bytes, *, requests: bool) -> list[int | str]:
    """The ids of a line's JSON-RPC requests (or of its answers)."""
    try:
        message = json.loads(line)
    except ValueError:
        return []
    batch: list[Any] = message if isinstance(message, list) else [message]
    return [m["id"] for m in batch
            if isinstance(m, dict) and isinstance(m.get("id"), int | str)
            and ("method" in m) == requests]  # fmt: skip


def _error(request_id: int | str, text: str) -> bytes:
    error = {"code": -32603, "message": text}  # JSON-RPC's internal error
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n"


def _forward(server: IO[bytes], pending: Pending) -> None:
    """The client's lines to the server, noting the requests; the client's end, its end."""
    try:
        for line in sys.stdin.buffer:
            pending.note(line, sent=True)
            server.write(line)
            server.flush()
        server.close()  # the MCP shutdown: the server's stdin closes, it exits
    except (BrokenPipeError, ValueError):  # the server is gone, or being stopped
        pass


def _refuse(text: str, out: IO[bytes]) -> int:
    """No server: every request is answered with `text`, until the client goes."""
    pending = Pending()
    for line in sys.stdin.buffer:
        pending.note(line, sent=True)
        out.write(b"".join(_error(i, text) for i in pending.take()))
        out.flush()
    return 127


def relay(limit_bytes: int, command: list[str]) -> int:
    out = sys.stdout.buffer
    try:
        server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except (OSError, ValueError) as exc:
        return _refuse(f"cannot start the MCP server: {exc}", out)
    assert server.stdin is not None and server.stdout is not None
    pending = Pending()
    threading.Thread(target=_forward, args=(server.stdin, pending), daemon=True).start()
    line = bytearray()
    while chunk := os.read(server.stdout.fileno(), CHUNK_BYTES):
        *ends, rest = chunk.split(b"\n")
        for end in ends:
            line += end
            if len(line) > limit_bytes:
                break
            pending.note(bytes(line), sent=False)
            out.write(line + b"\n")
            line.clear()
        else:
            line += rest
        if len(line) > limit_bytes:
            text = (f"the server's answer passed max_message_bytes ({limit_bytes} bytes): "
                    "not read further")  # fmt: skip
            out.write(b"".join(_error(i, text) for i in pending.take()))
            out.flush()
            print(f"mcp guard: {text}; the server ({command[0]}) is stopped", file=sys.stderr)
            server.kill()
            server.wait()
            return 1
        out.flush()
    out.write(line)
    out.flush()
    return server.wait()


if __name__ == "__main__":
    try:
        code = relay(int(sys.argv[1]), sys.argv[2:])
        sys.stdout.flush()
    except BrokenPipeError:  # the client went first: nothing to tell it
        code = 1
    os._exit(code)  # at once: the thread reading the client may hold stdin's lock
