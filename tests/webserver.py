"""A loopback HTTP server for tests and benches, on a thread of its own: each request is
answered with what the caller's function returns for it (an OTLP collector, a webhook, a
port already taken)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    content_type: str | None = None


@contextmanager
def serving(respond: Callable[[Request], Answer]) -> Iterator[str]:
    """The server's base URL (`http://127.0.0.1:PORT`) while the block runs; `respond` is
    called on the server's threads, one per connection."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            headers = {name.lower(): value for name, value in self.headers.items()}
            answer = respond(Request(self.command, self.path, headers, self.rfile.read(size)))
            self.send_response(answer.status)
            if answer.content_type is not None:
                self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def collecting_traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """An OTLP/HTTP collector on loopback, configured as the traces endpoint while the block
    runs: the bodies of the export requests it got, in order."""
    bodies: list[bytes] = []

    def collect(request: Request) -> Answer:
        bodies.append(request.body)
        return Answer()

    with serving(collect) as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{url}/v1/traces")
        yield bodies
