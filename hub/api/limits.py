"""Request body limit as plain ASGI: 413 on a large Content-Length, or once the stream passes it."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024
# An over-limit body up to this size is read and discarded (never kept) before the 413, so
# a client still uploading gets the answer instead of a reset connection; a larger one is
# refused at once and the connection closed.
DRAIN_MAX_BYTES = 4 * MAX_BODY_BYTES


class BodyTooLarge(HTTPException):
    """Raised from `receive` once the body passes the limit: a 413 wherever it is caught."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body over the {limit} byte limit")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _too_large(self) -> JSONResponse:
        return JSONResponse(
            {"detail": f"request body over the {self.max_body_bytes} byte limit"},
            status_code=413,
            headers={"Connection": "close"},
        )

    async def _drain(self, receive: Receive, seen: int) -> None:
        while seen <= DRAIN_MAX_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return
            seen += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            if int(length) <= DRAIN_MAX_BYTES:
                await self._drain(receive, 0)
            await self._too_large()(scope, receive, send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if started:
                raise
            await self._drain(receive, seen)
            await self._too_large()(scope, receive, send)
