"""A TCP proxy in front of a Redis server that loses a reply after the server ran the command.

`arm(pattern, mode)`: the next chunk a client sends that holds `pattern` marks its
connection. "reset": the server's reply is dropped and both sockets close (the command
ran; the client sees a broken link). "swallow": every byte the server sends on that
connection from then on is dropped and the sockets stay open (a half-dead link: the client
waits for ever).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Literal

from protocols.transport import Redis, connect

Mode = Literal["reset", "swallow"]


class LossyProxy:
    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.armed: list[tuple[bytes, Mode]] = []
        self.fired: list[Mode] = []
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port: int = s.getsockname()[1]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> LossyProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        return self

    def arm(self, pattern: bytes, mode: Mode) -> None:
        self.armed.append((pattern, mode))

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection(*self.target)
        self._writers += [cw, sw]
        marked: list[Mode] = []  # this connection's mode, once a chunk marks it

        async def up() -> None:
            with _quiet():
                while data := await cr.read(65536):
                    for i, (pattern, mode) in enumerate(self.armed):
                        if pattern in data:
                            marked.append(mode)
                            self.fired.append(mode)
                            del self.armed[i]
                            break
                    sw.write(data)
                    await sw.drain()

        async def down() -> None:
            with _quiet():
                while data := await sr.read(65536):
                    if "reset" in marked:
                        cw.transport.abort()
                        sw.transport.abort()
                        return
                    if "swallow" not in marked:
                        cw.write(data)
                        await cw.drain()

        for coro in (up(), down()):
            task = asyncio.ensure_future(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


class _quiet:
    """A socket the other side dropped ends its half of the relay, not the test."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, ConnectionError | OSError)


@contextlib.asynccontextmanager
async def lossy_clients(port: int, prefix: str) -> AsyncIterator[tuple[LossyProxy, Redis, Redis]]:
    """A proxy in front of the server on `port`, a client through it and one straight to
    the server; afterwards the keys under `prefix` are deleted and everything closed."""
    proxy = await LossyProxy(port).start()
    lossy, direct = connect(proxy.url), connect(f"redis://127.0.0.1:{port}/0")
    try:
        yield proxy, lossy, direct
    finally:
        async for key in direct.scan_iter(match=f"{prefix}*", count=1000):
            await direct.delete(key)
        await lossy.aclose()
        await direct.aclose()
        await proxy.close()
