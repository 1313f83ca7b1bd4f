"""Reading a remote's answer no further than a message could carry it (the `http` kind's
answers, the `a2a` kind's agent cards)."""

from __future__ import annotations

import httpx


async def body_within(response: httpx.Response, limit_bytes: int) -> bytes | None:
    """The body of a streamed response, decoded (a gzip bomb counts as it unpacks), or None
    once it passes `limit_bytes`: what could not be reported is not read further, and a
    hostile remote's body may have no end."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit_bytes:
            return None
    return bytes(body)
