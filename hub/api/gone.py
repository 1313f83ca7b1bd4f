"""A client that leaves mid-stream is not an error: the request ends quietly.

FastAPI's server-sent events (`response_class=EventSourceResponse`, the run's events) pass
each event through a keepalive task and memory streams. When the client disconnects while
that task waits to hand an event on, the request's teardown closes the stream it writes to
before it cancels the task, and anyio raises `BrokenResourceError` from it (FastAPI 0.165;
fastapi discussion #15725). Left alone, that is an "Exception in ASGI application" logged
with a traceback, and a 500 in the hub's own log, for a client that simply went away.

Only that is swallowed: the response had started, the client's disconnect was received,
and every error raised is one of anyio's closed-stream errors. Anything else, or the same
errors while the client is still there, is raised as before."""

from __future__ import annotations

import logging

from anyio import BrokenResourceError, ClosedResourceError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)
CLOSED = (BrokenResourceError, ClosedResourceError)


class ClientGone:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = gone = False

        async def watched_receive() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, watched_receive, watched_send)
        except CLOSED:
            if not (started and gone):
                raise
        except BaseExceptionGroup as group:
            if not (started and gone) or group.split(CLOSED)[1] is not None:
                raise
        else:
            return
        log.debug("%s %s: the client left mid-stream", scope["method"], scope["path"])
