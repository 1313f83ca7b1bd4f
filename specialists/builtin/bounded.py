"""Reading a remote's answer no further than a message could carry it (the `http` kind's
answers, the `a2a` kind's agent cards, the `mcp` kind's answers over HTTP)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable

import httpx


class OverLimit(Exception):
    """The answer passed the limit: what could not be reported is not read further."""


async def within(chunks: AsyncIterable[bytes], limit_bytes: int) -> AsyncGenerator[bytes, None]:
    """The chunks as they come, raising `OverLimit` once they pass `limit_bytes` together:
    a hostile remote's body may have no end. Give it decoded chunks (`aiter_bytes`), so a
    gzip bomb counts as it unpacks."""
    seen = 0
    async for chunk in chunks:
        seen += len(chunk)
        if seen > limit_bytes:
            raise OverLimit(f"over {limit_bytes} bytes")
        yield chunk


async def body_within(response: httpx.Response, limit_bytes: int) -> bytes | None:
    """The body of a streamed response, decoded, or None once it passes `limit_bytes`."""
    try:
        return b"".join([chunk async for chunk in within(response.aiter_bytes(), limit_bytes)])
    except OverLimit:
        return None
