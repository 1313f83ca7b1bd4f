"""The `a2a` kind's HTTP answers read no further than one message could carry them
(`max_message_bytes`): a body whole (a JSON answer: `SendMessage` without streaming,
`GetTask`, a card), or each event of an event stream, counted decoded so a gzip bomb counts
as it unpacks. The a2a-sdk reads a body whole and holds an event until it ends, so a hostile
agent's single answer could otherwise grow the replica's memory without end. Done as a
response hook, so the client keeps its own transport and the proxies the environment names."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import httpx

from specialists.builtin.bounded import OverLimit, decoded, events_within, within


class AnswerTooLong(httpx.RequestError):
    """An agent's answer (or one of its events) passed `max_message_bytes`. A RequestError,
    which the SDK turns into the failure of the call it answers."""


class _Within(httpx.AsyncByteStream):
    """A response's body, decoded, read no further than `limit_bytes` (a whole body, or each
    event of an event stream)."""

    def __init__(self, response: httpx.Response, limit_bytes: int) -> None:
        # the answer as the transport gave it, which decodes what it was encoded with
        self.raw = httpx.Response(
            response.status_code, headers=response.headers.copy(), stream=response.stream
        )
        self.request, self.limit_bytes = response.request, limit_bytes
        self.events = response.headers.get("content-type", "").startswith("text/event-stream")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        bounded = events_within if self.events else within
        try:
            async with aclosing(bounded(decoded(self.raw), self.limit_bytes)) as body:
                async for chunk in body:
                    yield chunk
        except OverLimit:
            what = "an event from" if self.events else "the answer from"
            raise AnswerTooLong(
                f"{what} {self.request.url} is over the {self.limit_bytes}-byte limit of a "
                "message: not read further",
                request=self.request,
            ) from None

    async def aclose(self) -> None:
        await self.raw.aclose()


def bounding(limit_bytes: int) -> Callable[[httpx.Response], Awaitable[None]]:
    """A response hook reading every answer through `_Within`: its body now comes decoded,
    so the headers no longer say it is encoded."""

    async def bound(response: httpx.Response) -> None:
        response.stream = _Within(response, limit_bytes)
        if response.headers.pop("content-encoding", None) is not None:
            response.headers.pop("content-length", None)

    return bound
