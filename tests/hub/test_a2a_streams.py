"""Every A2A wait for a run's events (SubscribeToTask, message:stream, a blocking
message:send) takes a slot of the hub's event fanout, under the same caps as the REST event
stream: past them it is refused with an error the client can act on, and the hub keeps its
Redis connections, its lease and its REST API. A real hub process, the official SDK client."""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers import new_text_part
from a2a.types import (
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes
from tests.helpers import eventually

pytestmark = pytest.mark.redis
CAP = 2
WAITS = "cuelist: a2a-waits\ncues:\n  - {id: A, target_agents: [nobody], ack_timeout_s: 3600}\n"


async def _client(api: httpx.AsyncClient, url: str, binding: str, streaming: bool) -> Client:
    card = await A2ACardResolver(api, url).get_agent_card()
    config = ClientConfig(httpx_client=api, streaming=streaming,
                          supported_protocol_bindings=[binding])  # fmt: skip
    return ClientFactory(config).create(card)


async def _streams_open(api: httpx.AsyncClient, n: int) -> bool:
    found = re.search(r"^callboard_event_streams (\S+)$", (await api.get("/metrics")).text, re.M)
    return found is not None and float(found.group(1)) == n


def _start(skill: str) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()),
                      parts=[new_text_part("go")], metadata={"skill": skill})  # fmt: skip
    return SendMessageRequest(message=message)


async def test_a2a_streams_past_the_cap_are_refused_and_the_hub_keeps_leading(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    env = child_env(redis_server, CALLBOARD_SSE_MAX_STREAMS=str(CAP),
                    CALLBOARD_SSE_PER_CLIENT=str(CAP))  # fmt: skip
    with processes(env, tmp_path) as procs:
        url = procs.hub()
        async with httpx.AsyncClient(base_url=url, timeout=30) as api:
            headers = {"Content-Type": "application/yaml"}
            r = await api.post("/v1/cuelists", content=WAITS, headers=headers)
            assert r.status_code == 201
            run_id = (await api.post("/v1/runs", json={"cuelist": "a2a-waits"})).json()["run_id"]
            rpc = await _client(api, url, "JSONRPC", streaming=True)
            rest = await _client(api, url, "HTTP+JSON", streaming=True)
            held: list[AsyncIterator[StreamResponse]] = []
            for client in (rpc, rest):  # the cap's worth, one per binding
                stream = client.subscribe(SubscribeToTaskRequest(id=run_id))
                first = await anext(stream)  # the task: the stream is open
                assert first.task.status.state == TaskState.TASK_STATE_WORKING
                held.append(stream)
            await eventually(lambda: _streams_open(api, CAP), 10, message="streams counted")

            # JSON-RPC: the SDK's error, saying which cap and that it is worth trying later
            with pytest.raises(A2AError, match="CALLBOARD_SSE_MAX_STREAMS"):
                await anext(rpc.subscribe(SubscribeToTaskRequest(id=run_id)))
            with pytest.raises(A2AError, match="try again later"):
                await anext(rpc.send_message(_start("a2a-waits")))  # message:stream
            blocking = await _client(api, url, "JSONRPC", streaming=False)
            runs_before = len((await api.get("/v1/runs")).json()["data"])
            with pytest.raises(A2AError, match="try again later"):
                await anext(blocking.send_message(_start("a2a-waits")))
            assert len((await api.get("/v1/runs")).json()["data"]) == runs_before  # none began
            # HTTP+JSON: 503 with Retry-After, as the REST event stream answers
            r = await api.get(f"/a2a/tasks/{run_id}:subscribe", headers={"A2A-Version": "1.0"})
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "5"
            assert r.json()["error"]["status"] == "UNAVAILABLE"

            health = (await api.get("/healthz")).json()
            assert health["leader"] is True
            assert (await api.get(f"/v1/runs/{run_id}")).status_code == 200

            for stream in held:  # closing a stream gives its slot back
                await stream.aclose()  # type: ignore[attr-defined]
            await eventually(lambda: _streams_open(api, 0), 10, message="slots given back")
            again = rpc.subscribe(SubscribeToTaskRequest(id=run_id))
            assert (await anext(again)).task.id == run_id
            await again.aclose()  # type: ignore[attr-defined]


async def test_a2a_streams_whose_clients_read_nothing_let_their_slots_go(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    """A client that opens message:stream and never reads: the hub's sends fill the socket
    and wait. The SDK sends from inside the stream's generator, so before, its deadline
    never ran and the slot was held for as long as the client kept the socket open (the
    per-client cap then refused every stream and blocking send of that address)."""
    chain = "".join(f"  - {{id: C{i}, target_agents: [w], depends_on: [C{i - 1}]}}\n"
                    for i in range(1, 1500))  # fmt: skip
    cuelist = f"cuelist: a2a-long\ncues:\n  - {{id: C0, target_agents: [w]}}\n{chain}"
    env = child_env(redis_server, CALLBOARD_SSE_MAX_S="2", CALLBOARD_SSE_PER_CLIENT=str(CAP))
    with processes(env, tmp_path) as procs:
        url = procs.hub()
        host, port = httpx.URL(url).host, httpx.URL(url).port
        async with httpx.AsyncClient(base_url=url, timeout=30) as api:
            r = await api.post("/v1/cuelists", content=cuelist,
                               headers={"Content-Type": "application/yaml"})  # fmt: skip
            assert r.status_code == 201, r.text
            body = json.dumps({"message": {
                "messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                "parts": [{"data": {"cuelist": "a2a-long", "dry": True}}],
            }}).encode()  # fmt: skip
            request = (
                b"POST /a2a/message:stream HTTP/1.1\r\nHost: 127.0.0.1\r\nA2A-Version: 1.0\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            ) + body
            silent = []
            for _ in range(CAP):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect((host, port))
                sock.sendall(request)
                silent.append(sock)  # never read
            try:
                await eventually(lambda: _streams_open(api, CAP), 20, message="both open")
                await eventually(lambda: _streams_open(api, 0), 30, message="slots let go")
                rest = await _client(api, url, "HTTP+JSON", streaming=True)
                async for _ in rest.send_message(_start("a2a-long")):
                    break  # admitted (its first event): the address's streams were let go
            finally:
                for sock in silent:
                    sock.close()
