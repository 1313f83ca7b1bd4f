"""The `mcp` specialist against MCP servers that answer without measure: an answer past one
message (`max_message_bytes`, 256 KiB here) is read no further, over streamable HTTP and over
stdio, the cue fails saying so, and the replica goes on serving."""

from __future__ import annotations

import asyncio
import json
import sys
import tracemalloc
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from itertools import chain
from typing import Any

import httpx2
import pytest
from mcp.shared._httpx_utils import create_mcp_http_client

from protocols.messages import MessageType
from specialists.builtin import mcp_http
from specialists.builtin.mcp import Mcp, McpSettings
from specialists.builtin.mcp_http import http_client
from tests.specialists.chunked import Chunked, gzipped
from tests.specialists.conftest import HubSide, Starter

pytestmark = pytest.mark.redis

M = MessageType
MiB = 2**20
TOOLS = [{"name": name, "inputSchema": {"type": "object"}} for name in ("huge", "small")]


def _result(request: dict[str, Any]) -> dict[str, Any]:
    """What a well-behaved server answers (handshake-era: no `server/discover`)."""
    method, params = request["method"], request.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"}}  # fmt: skip
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        return {"content": [{"type": "text", "text": "ok"}]}
    raise LookupError(method)


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"jsonrpc": "2.0", "id": request["id"], "result": _result(request)}
    except LookupError:
        error = {"code": -32601, "message": "Method not found"}
        return {"jsonrpc": "2.0", "id": request["id"], "error": error}


def _huge(request: dict[str, Any], size: int) -> Iterator[bytes]:
    """An answer to `request` whose one string holds `size` bytes, 64 KiB at a time."""
    start = {"jsonrpc": "2.0", "id": request["id"], "result": {}}
    if request["method"] == "tools/list":
        start["result"] = {
            "tools": [{"name": "huge", "inputSchema": {"type": "object"}, "description": "@"}]
        }
    else:
        start["result"] = {"content": [{"type": "text", "text": "@"}]}
    head, tail = json.dumps(start).encode().split(b"@")
    yield head
    for _ in range(size // 65536):
        yield b"x" * 65536
    yield tail


class _HostileHttp(Chunked):
    """A streamable-HTTP MCP server, just enough of one, that answers `tools/call huge` (and,
    with `huge_list`, `tools/list`) with 64 MiB of JSON: chunked, or gzipped on the way (64
    KiB on the wire), or as one server-sent event."""

    def __init__(self, framing: str = "json", huge_list: bool = False) -> None:
        super().__init__()
        self.framing, self.huge_list = framing, huge_list

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            length = [int(line.split(":")[1]) for line in head.split("\r\n")
                      if line.lower().startswith("content-length:")]  # fmt: skip
            if not head.startswith("POST"):  # no GET stream, no session to delete
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            request = json.loads(await reader.readexactly(length[0]))
            if "id" not in request:  # a notification
                writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
            elif self._is_huge(request):
                await self._huge(request, writer)
            else:
                body = json.dumps(_answer(request)).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
            await writer.drain()
        except ConnectionError:
            self.done.set()
        finally:
            writer.close()

    def _is_huge(self, request: dict[str, Any]) -> bool:
        if request["method"] == "tools/list":
            return self.huge_list
        return request["method"] == "tools/call" and request["params"]["name"] == "huge"

    async def _huge(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        kind, extra = b"application/json", b""
        chunks: Iterable[bytes] = _huge(request, 64 * MiB)
        if self.framing == "gzip":
            extra = b"Content-Encoding: gzip\r\n"
            chunks = gzipped(chunks)
        elif self.framing == "sse":
            kind = b"text/event-stream"
            chunks = chain([b"event: message\r\ndata: "], chunks, [b"\r\n\r\n"])
        await self.send(writer, kind, chunks, extra=extra)
        self.done.set()


@asynccontextmanager
async def _serving(server: _HostileHttp) -> AsyncIterator[str]:
    listening = await asyncio.start_server(server, "127.0.0.1", 0)
    async with listening:
        yield f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/mcp"


@pytest.mark.parametrize("framing", ["json", "gzip", "sse"])
async def test_mcp_stops_reading_a_tool_answer_past_one_message(
    start: Starter, hub: HubSide, framing: str
) -> None:
    """A tool answering with 64 MiB of JSON: reading stops past the 256 KiB a message may
    hold, whether the body is plain, a gzip bomb or one server-sent event, and the cue fails
    saying so; the next cue on the replica is served. On the code before, the SDK read a plain
    or gzipped answer whole (64 MiB sent; a peak of 300 MiB and more in the replica) and the
    cue failed only when its result could not be sent; an event was read up to the SDK's own
    1 MiB."""
    hostile = _HostileHttp(framing)
    async with _serving(hostile) as url:
        await start(Mcp, url=url)
        tracemalloc.start()
        try:
            await hub.go("CUE-1", tool="huge")
            [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1", timeout_s=30)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await asyncio.wait_for(hostile.done.wait(), 5)
        await hub.go("CUE-2", tool="small")
        [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-2", timeout_s=10)
    if framing == "sse":  # the SDK's own bound on an event, given max_message_bytes
        assert "exceeded the 262144 byte limit" in failed.payload.error
    else:
        assert f"the answer from {url} passed max_message_bytes" in failed.payload.error
        assert "(262144 bytes): not read further" in failed.payload.error
    assert hostile.sent < 8 * MiB  # what the socket's buffers take, not the 64 MiB
    assert peak < 8 * MiB  # a few read chunks, not 64 MiB
    assert done.payload.result["content"] == [{"type": "text", "text": "ok"}]


async def test_mcp_stops_reading_a_tool_list_past_one_message(start: Starter, hub: HubSide) -> None:
    """A tool list of 64 MiB: reading stops past 256 KiB and the cue is not ready, saying
    so. On the code before, the SDK read it whole (a bigger or endless one grew memory
    without end) and the cue was ready."""
    hostile = _HostileHttp(huge_list=True)
    async with _serving(hostile) as url:
        await start(Mcp, url=url)
        await hub.warning("CUE-1", tool="huge")
        await hub.standby("CUE-1")
        [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1", timeout_s=30)
        await asyncio.wait_for(hostile.done.wait(), 5)
    assert not ack.payload.ready
    assert f"the answer from {url} passed max_message_bytes" in ack.payload.reason
    assert hostile.sent < 8 * MiB


async def test_mcp_http_client_keeps_the_sdks_timeouts_and_the_token() -> None:
    async with (
        http_client({"Authorization": "Bearer t0"}, 1024) as bounded,
        create_mcp_http_client() as sdk,
    ):
        assert bounded.timeout == sdk.timeout
        assert bounded.headers["authorization"] == "Bearer t0"


@pytest.mark.parametrize("server", ["silent", "drip"])
async def test_a_session_delete_never_answered_whole_ends_within_close_s(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK sends a DELETE as it closes a session and waits for its answer with the
    client's timeouts (300 s a read): a server that never answered it, or answered a byte
    every few seconds, held each call, and each WARNING's look at the tools, that long."""
    monkeypatch.setattr(mcp_http, "CLOSE_S", 0.5)

    done, served = asyncio.Event(), asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if server == "drip":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                for _ in range(1000):
                    if done.is_set():
                        break
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(0.1)
            await done.wait()
        finally:
            writer.close()
            served.set()

    listening = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        async with http_client(None, 1024) as client:
            started = asyncio.get_running_loop().time()
            with pytest.raises(httpx2.ReadTimeout, match=r"DELETE within 0\.5s"):
                await client.delete(f"http://127.0.0.1:{port}/mcp")
            assert asyncio.get_running_loop().time() - started < 5
    finally:
        done.set()
        await asyncio.wait_for(served.wait(), 10)
        listening.close()
        await listening.wait_closed()


STDIO_SERVER = r"""
import json, sys

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    method, params, id_ = request["method"], request.get("params") or {}, request["id"]
    if method == "tools/call" and params["name"] == "huge":  # a line that does not end
        sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"content": '
                         '[{"type": "text", "text": "' % json.dumps(id_))
        for _ in range(512):
            sys.stdout.write("x" * 65536)
        sys.stdout.flush()
        sys.stdin.read()  # held open until the client goes
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": id_, "result": {
            "protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "endless", "version": "1"}}})
    elif method == "tools/list":
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ("huge", "small")]
        send({"jsonrpc": "2.0", "id": id_, "result": {"tools": tools}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": id_,
              "result": {"content": [{"type": "text", "text": "ok"}]}})
    else:
        send({"jsonrpc": "2.0", "id": id_,
              "error": {"code": -32601, "message": "Method not found"}})
"""


async def test_mcp_stops_reading_a_stdio_line_past_one_message(
    start: Starter, hub: HubSide
) -> None:
    """A stdio server writing 32 MiB on one line that does not end: reading stops past the
    256 KiB a message may hold and the cue fails saying so; the next cue is served. On the
    code before, the SDK held all 32 MiB (a peak of 57 MiB, the line copied at each
    read) and waited for the end of the line until the call's timeout."""
    await start(Mcp, mcp_settings=McpSettings(timeout_s=10))
    server = [sys.executable, "-c", STDIO_SERVER]
    tracemalloc.start()
    try:
        await hub.go("CUE-1", server=server, tool="huge")
        [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1", timeout_s=30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    await hub.go("CUE-2", server=server, tool="small")
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-2", timeout_s=10)
    assert "the server's answer passed max_message_bytes" in failed.payload.error
    assert "(262144 bytes): not read further" in failed.payload.error
    assert peak < 8 * MiB
    assert done.payload.result["content"] == [{"type": "text", "text": "ok"}]


async def test_mcp_stdio_server_that_cannot_start_says_why(start: Starter, hub: HubSide) -> None:
    """The guard starts the server: a command it cannot start is the answer to the request,
    not a connection closed without a word."""
    await start(Mcp)
    await hub.warning("CUE-1", server=["/nonexistent/mcp-server"], tool="add")
    await hub.standby("CUE-1")
    [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1", timeout_s=20)
    assert not ack.payload.ready
    assert "cannot start the MCP server" in ack.payload.reason
    assert "No such file or directory: '/nonexistent/mcp-server'" in ack.payload.reason


async def test_mcp_over_http_goes_through_the_environment_s_proxy(
    start: Starter, hub: HubSide, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY names a proxy: the calls go through it (here the server itself, which a
    proxy's absolute-form requests reach), as the SDK's own client would send them; a
    host NO_PROXY names is called directly."""
    answering = _HostileHttp()
    async with _serving(answering) as url:
        proxy = url.removesuffix("/mcp")
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("NO_PROXY", "direct.invalid")
        await start(Mcp, url="http://mcp.invalid/mcp")  # no such host: only the proxy knows
        await hub.go("CUE-1", tool="small")
        [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1", timeout_s=20)
        assert done.payload.result["content"] == [{"type": "text", "text": "ok"}]
        await hub.go("CUE-2", tool="small", server="http://direct.invalid/mcp")
        [failed] = await hub.wait(M.STATUS_FAILED, "CUE-2", timeout_s=20)
    assert failed.payload.error.startswith("ConnectError")  # through the proxy, it would work
