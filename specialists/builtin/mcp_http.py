"""The `mcp` kind's HTTP client: the SDK's, with a server's answer read no further than one
message (`max_message_bytes`) could carry it, counted as it unpacks. An event stream is left
to the SDK, which bounds each event (`max_sse_event_size`). A client given a transport reads
no proxy from the environment, so the transport does, as the SDK's own client would:
HTTP_PROXY, HTTPS_PROXY or ALL_PROXY, but for the hosts NO_PROXY names (the standard
library's reading of them, `urllib.request.getproxies` and `proxy_bypass`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from urllib.request import getproxies, proxy_bypass

import anyio
import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from specialists.builtin.bounded import OverLimit, within

CLOSE_S = 5.0  # the session's DELETE as the client closes: sent and answered whole within


class AnswerTooLong(httpx2.StreamError):
    """A server's answer passed `max_message_bytes`. A StreamError, as the SDK turns that into
    the failure of the request it answers (anything else would leave the request waiting for
    its timeout)."""


class _Within(httpx2.AsyncByteStream):
    """A response's body, decoded, up to `limit_bytes` (`bounded.within`)."""

    def __init__(self, response: httpx2.Response, url: httpx2.URL, limit_bytes: int) -> None:
        self.response, self.url, self.limit_bytes = response, url, limit_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async with aclosing(within(self.response.aiter_bytes(), self.limit_bytes)) as body:
                async for chunk in body:
                    yield chunk
        except OverLimit:
            raise AnswerTooLong(
                f"the answer from {self.url} passed max_message_bytes ({self.limit_bytes} "
                "bytes): not read further"
            ) from None

    async def aclose(self) -> None:
        await self.response.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, with every answer but an event stream (which the SDK reads an
    event at a time, each bounded) read no further than `limit_bytes`, decoded."""

    def __init__(self, limit_bytes: int) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        proxies = getproxies()  # the environment's, read once, as a client reads them
        self.proxied = {
            scheme: httpx2.AsyncHTTPTransport(proxy=proxy)
            for scheme in ("http", "https")
            if (proxy := proxies.get(scheme) or proxies.get("all"))
        }
        self.limit_bytes = limit_bytes

    def _through(self, url: httpx2.URL) -> httpx2.AsyncHTTPTransport:
        proxied = self.proxied.get(url.scheme)
        if proxied is None or proxy_bypass(url.host):
            return self.inner
        return proxied

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "DELETE":
            return await self._closing(request)
        response = await self._through(request.url).handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return response
        headers = response.headers.copy()
        if headers.pop("content-encoding", None) is not None:  # decoded here, not again
            headers.pop("content-length", None)
        body = _Within(response, request.url, self.limit_bytes)
        return httpx2.Response(response.status_code, headers=headers, stream=body,
                               extensions=response.extensions)  # fmt: skip

    async def _closing(self, request: httpx2.Request) -> httpx2.Response:
        """The session's DELETE, sent as the client closes, and its answer read whole within
        CLOSE_S: the SDK waits for it with the client's timeouts (300 s a read), so a server
        that never answered it, or answered a byte every few seconds, held the cue's call,
        and every WARNING's look at the tools, for as long."""
        try:
            with anyio.fail_after(CLOSE_S):
                response = await self._through(request.url).handle_async_request(request)
                try:
                    body = _Within(response, request.url, self.limit_bytes)
                    content = b"".join([chunk async for chunk in body])
                finally:
                    await response.aclose()
        except TimeoutError:
            raise httpx2.ReadTimeout(
                f"no whole answer to the session's DELETE within {CLOSE_S:g}s", request=request
            ) from None
        return httpx2.Response(response.status_code, content=content, request=request)

    async def aclose(self) -> None:
        for transport in (self.inner, *self.proxied.values()):
            await transport.aclose()


def http_client(headers: dict[str, str] | None, limit_bytes: int) -> httpx2.AsyncClient:
    """The SDK's client (`create_mcp_http_client`: its timeouts), on a `BoundedTransport`."""
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    return httpx2.AsyncClient(headers=headers, timeout=timeout,
                              transport=BoundedTransport(limit_bytes))  # fmt: skip
