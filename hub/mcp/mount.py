"""Mounting the MCP server at `/mcp`: one MCPServer and session manager per run of the app's
lifespan (a session manager runs once), stateless streamable HTTP (any hub answers any
request, a restart loses no session), POST only, behind the REST API's key check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hub.a2a.mount import RequireKey
from hub.mcp.tools import build
from hub.service import Hub

MCP_PATH = "/mcp"


class McpEndpoint:
    """The ASGI endpoint at /mcp: the running session manager's app, or 503 between runs."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.app: StreamableHTTPASGIApp | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        server = build(self.hub)
        server.streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
            host=self.hub.settings.host,  # loopback: the SDK's DNS-rebinding check is on
        )  # fmt: skip
        manager = server.session_manager
        async with manager.run():
            self.app = StreamableHTTPASGIApp(manager)
            try:
                yield
            finally:
                self.app = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            answer = JSONResponse({"detail": "the MCP server is not running"}, status_code=503)
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)


class JsonRefusals:
    """The SDK answers a request it refuses before reading it (a wrong Content-Type or
    Accept, a Host its DNS-rebinding check does not know) in plain text; every other answer
    of the API, its own refusals included, is JSON. Such an answer (4xx, not JSON) is sent
    as `{"detail": "<the SDK's words>"}`, with its status and other headers kept."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: Message | None = None  # a refusal's start, sent once its body is read
        body: list[bytes] = []

        async def sending(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and _plain_refusal(message):
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            text = b"".join(body).decode("utf-8", "replace").strip() or "refused"
            answer = JSONResponse({"detail": text}, status_code=held["status"])
            kept = [(k, v) for k, v in held.get("headers", []) if k.lower() not in _SET_BY_ANSWER]
            answer.raw_headers = [*answer.raw_headers, *kept]
            await answer(scope, receive, send)

        await self.app(scope, receive, sending)


_SET_BY_ANSWER = {b"content-type", b"content-length"}


def _plain_refusal(start: Message) -> bool:
    if not 400 <= start["status"] < 500:
        return False
    for name, value in start.get("headers", []):
        if name.lower() == b"content-type":
            return not value.lower().startswith(b"application/json")
    return True


def install(app: FastAPI, hub: Hub) -> None:
    """Route /mcp to the MCP server; the app's lifespan runs it (`app.state.lifespans`)."""
    endpoint = McpEndpoint(hub)
    # POST only: GET and DELETE are 405 (Allow: POST), as the spec lets a server without a
    # standalone stream answer. Stateless, the SDK would open a GET stream that never
    # carries a message (nothing is sent outside a POST's answer) and never ends, and there
    # is no session to DELETE.
    app.router.routes.append(Route(MCP_PATH, RequireKey(JsonRefusals(endpoint)), methods=["POST"]))
    app.state.lifespans.append(endpoint.running)
