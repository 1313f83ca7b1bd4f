"""The desk's pages carry a Content Security Policy and no-framing headers: a page shows what
agents say (reasons, context, results, dead letters), so were a string ever rendered as
markup, the browser still runs no script but the desk's own, loads nothing from elsewhere,
and no other site can frame the page to steer an operator's clicks on GO.

A pure ASGI middleware (no per-request task, unlike Starlette's BaseHTTPMiddleware): an API
path (/v1, /metrics, /a2a, /mcp...) passes through on one prefix check, as does /docs
(Swagger UI runs an inline script of its own)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
NOT_DESK = (
    "/v1/",
    "/docs",
    "/openapi.json",
    "/metrics",
    "/healthz",
    "/a2a",
    "/mcp",
    "/.well-known",
)


class DeskHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(NOT_DESK):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kind = dict(message.get("headers", ())).get(b"content-type", b"")
                if kind.startswith(b"text/html"):
                    message["headers"] = [*message.get("headers", ()), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
