"""A client that leaves a stream of server-sent events mid-way ends its request quietly: no
"Exception in ASGI application", no 500 logged (hub.api.gone), and nothing else is hidden."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anyio import BrokenResourceError
from fastapi import FastAPI
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hub.api.gone import ClientGone
from tests.helpers import eventually

SCOPE: dict[str, Any] = {
    "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
    "scheme": "http", "path": "/events", "raw_path": b"/events", "query_string": b"",
    "root_path": "", "headers": [], "client": ("127.0.0.1", 1), "server": ("hub", 80),
}  # fmt: skip


def _streaming() -> tuple[FastAPI, list[int]]:
    """An app whose route streams events as fast as it is asked (FastAPI's own SSE), and how
    many it has made."""
    app, made = FastAPI(), [0]

    @app.get("/events", response_class=EventSourceResponse)
    async def events() -> AsyncIterator[ServerSentEvent]:
        for n in range(1000):
            made[0] += 1
            yield ServerSentEvent(id=str(n), data={"n": n})

    return app, made


async def _leave_mid_stream(app: ASGIApp, made: list[int]) -> None:
    """A client whose socket takes the first event and then no more (its send never
    returns), and which disconnects once the route's tasks are all blocked on it: the
    generator has made 5 events, so FastAPI's keepalive task holds one it cannot hand on."""
    requested = False

    async def receive() -> Message:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await eventually(lambda: made[0] >= 5, 5, interval_s=0.001, message="events made")
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            await asyncio.Event().wait()  # a full socket: cancelled when the client leaves

    await asyncio.wait_for(app(dict(SCOPE), receive, send), 10)


async def test_fastapi_sse_raises_when_the_client_leaves_mid_stream() -> None:
    """Why ClientGone exists: FastAPI's SSE keepalive task raises on this disconnect. When an
    upgrade stops it, this fails and the middleware can go."""
    app, made = _streaming()
    with pytest.raises(BaseExceptionGroup) as raised:
        await _leave_mid_stream(app, made)
    assert raised.value.split(BrokenResourceError)[1] is None


async def test_a_client_leaving_mid_stream_ends_the_request_quietly() -> None:
    app, made = _streaming()
    await _leave_mid_stream(ClientGone(app), made)


def _failing(error: BaseException, start: bool) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if start:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        await receive()
        raise error

    return app


def _disconnects(gone: bool) -> Receive:
    async def receive() -> Message:
        return {"type": "http.disconnect" if gone else "http.request", "body": b""}

    return receive


async def _sent(message: Message) -> None:
    pass


@pytest.mark.parametrize(
    ("error", "start", "gone"),
    [
        (BaseExceptionGroup("x", [BrokenResourceError()]), True, False),  # the client is there
        (BaseExceptionGroup("x", [BrokenResourceError()]), False, True),  # nothing was sent
        (BaseExceptionGroup("x", [BrokenResourceError(), ValueError()]), True, True),
        (ValueError("a bug"), True, True),
    ],
    ids=["client-still-there", "not-started", "another-error-beside", "another-error"],
)
async def test_anything_else_is_raised_as_before(
    error: BaseException, start: bool, gone: bool
) -> None:
    with pytest.raises(type(error)):
        await ClientGone(_failing(error, start))(dict(SCOPE), _disconnects(gone), _sent)


async def test_a_closed_stream_after_the_client_left_is_not_raised() -> None:
    for error in (BaseExceptionGroup("x", [BrokenResourceError()]), BrokenResourceError()):
        await ClientGone(_failing(error, True))(dict(SCOPE), _disconnects(True), _sent)
