"""Mounting callboard's A2A agent in the hub app: the card at `/.well-known/agent-card.json`,
the HTTP+JSON binding under `/a2a` (`/a2a/message:send`, `/a2a/tasks/{id}:cancel`...) and
JSON-RPC at `/a2a/jsonrpc`, all behind the REST API's key check; each call knows its
client's address (the event streams' per-client cap), and a 503 says when to come back."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hub.a2a.card import A2A_PATH, RPC_PATH, hub_card
from hub.a2a.errors import RETRY_AFTER_S
from hub.a2a.handler import RunTasks
from hub.api.deps import require_api_key
from hub.service import Hub

log = logging.getLogger(__name__)
SEND_STALL_S = 60.0  # a client may take no bytes of an answer this long (see SendDeadline)
DEPTH_MAX = 256  # a JSON-RPC body's nesting (see NestedTooDeep)
# A body with fewer brackets than this cannot nest past DEPTH_MAX: the SDK alone parses it
DEEP_BRACKETS = DEPTH_MAX


class RequireKey:
    """The REST API's key check (`require_api_key`) in front of a mounted ASGI app, with the
    same JSON 401/403 answers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            creds = None
            if scheme.lower() == "bearer" and token:
                creds = HTTPAuthorizationCredentials(scheme=scheme, credentials=token)
            try:
                await require_api_key(request, creds)
            except HTTPException as exc:
                answer = JSONResponse(
                    {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
                )
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ClientContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the client's address in `state["client"]` (the REST
    event stream counts streams per address too)."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["client"] = request.client.host if request.client else "unknown"
        return context


class RetryAfter:
    """Adds Retry-After to the binding's 503 answers (hub.a2a.errors.Unavailable): the SDK
    writes the status and body, but no header of ours."""

    def __init__(self, app: ASGIApp, retry_after_s: int) -> None:
        self.app = app
        self.value = str(retry_after_s).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503:
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"retry-after" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"retry-after", self.value)]}
            await send(message)

        await self.app(scope, receive, sending)


class SendStalled(TimeoutError):
    """A client took no bytes of its answer for `SendDeadline.limit_s`."""


class SendDeadline:
    """Ends an answer whose client stops reading: a send that waits past `limit_s` (the
    socket full, the client reading nothing) is given up and the connection dropped. The
    SDK's event stream sends from inside its generator, so a stalled send kept its fanout
    slot, past every deadline of its own, until the client went away: a few such clients
    held the per-client and global caps for ever. Given up, the stream's generator is
    closed (sse-starlette does so when a send fails) and its slot let go."""

    def __init__(self, app: ASGIApp, limit_s: float) -> None:
        self.app = app
        self.limit_s = limit_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            try:
                async with asyncio.timeout(self.limit_s):
                    await send(message)
            except TimeoutError:
                raise SendStalled(f"the client read nothing for {self.limit_s:g}s") from None

        try:
            await self.app(scope, receive, sending)
        except* SendStalled as stalled:  # (raised in a task group, maybe grouped)
            log.info("an A2A answer to %s given up: %s", _peer(scope), stalled.exceptions[0])


class NestedTooDeep:
    """A JSON-RPC body nested past DEPTH_MAX, or that is no JSON, gets the Parse error
    (-32700) the SDK gives a body it cannot parse. Before, one nested past what Python's
    parser takes (a RecursionError in the SDK's `json.loads`) got an Internal error
    (-32603), and the SDK logged a traceback at ERROR for each such request. Only a body
    with at least DEEP_BRACKETS brackets is parsed here first (orjson, bounded by the API's
    body limit); the others go straight to the SDK."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away: nobody to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if _nested_too_deep(body):
            error = {"code": -32700, "message": "Parse error: the body nests too deep"}
            answer = JSONResponse({"jsonrpc": "2.0", "id": None, "error": error})
            await answer(scope, receive, send)
            return
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _nested_too_deep(body: bytes) -> bool:
    """Whether `body` is no JSON the SDK can take (orjson, in C, refuses it: not JSON, or
    past its depth of 1,024) or nests deeper than DEPTH_MAX (well under where Python's
    parser runs out of stack: about 935 levels in the SDK's handler)."""
    if body.count(b"[") + body.count(b"{") < DEEP_BRACKETS:
        return False
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return True
    stack: list[tuple[Any, int]] = [(parsed, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > DEPTH_MAX:
            return True
        if isinstance(item, dict):
            stack.extend((value, depth + 1) for value in item.values())
        elif isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)
    return False


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def install(app: FastAPI, hub: Hub, stopping: asyncio.Event) -> None:
    """Add the card route and mount the A2A bindings on `app`."""

    async def agent_card(request: Request) -> JSONResponse:
        card = await hub_card(
            hub.cuelists, str(request.base_url), secured=bool(hub.settings.api_key)
        )
        return JSONResponse(agent_card_to_dict(card))

    app.add_api_route(
        AGENT_CARD_WELL_KNOWN_PATH, agent_card, methods=["GET"], include_in_schema=False,
        dependencies=[Depends(require_api_key)],
    )  # fmt: skip
    handler = RunTasks(hub, stopping)
    context = ClientContext()
    # the tenant Mount create_rest_routes adds is left out: no tenants here
    rest = [r for r in create_rest_routes(handler, context) if isinstance(r, Route)]
    bindings = Starlette(routes=[*create_jsonrpc_routes(handler, RPC_PATH, context), *rest])
    guarded = NestedTooDeep(bindings, A2A_PATH + RPC_PATH)
    # a refused stream's wait is the fanout's; a Redis outage's, ours
    retry_after_s = max(hub.fanout.retry_after_s, RETRY_AFTER_S)
    # a send may wait as long as a whole stream may last, and no longer (SEND_STALL_S)
    stall_s = min(SEND_STALL_S, hub.settings.sse_max_s)
    app.mount(A2A_PATH, RequireKey(RetryAfter(SendDeadline(guarded, stall_s), retry_after_s)))
