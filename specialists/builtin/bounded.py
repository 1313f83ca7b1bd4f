"""Reading a remote's answer no further than a message could carry it (the `http` kind's
answers, the `a2a` kind's answers and events, the `mcp` kind's answers over HTTP)."""

from __future__ import annotations

import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator

import httpx

PIECE = 65536  # the most one step of inflating makes: a gzip bomb unpacks a piece at a time
WBITS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS, "x-gzip": zlib.MAX_WBITS | 16}
TRAILING_MAX = 1024  # bytes after the end of a packed body that are ignored, not refused
GZIP_MAGIC = b"\x1f\x8b"  # how a gzip member starts
CODINGS_MAX = 4  # Content-Encoding layers unpacked; more is refused


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


BLANK_LINE = re.compile(rb"\n\n|\r\r|\n\r")  # two line ends in a row, however written


async def events_within(
    chunks: AsyncIterable[bytes], limit_bytes: int
) -> AsyncGenerator[bytes, None]:
    """An event stream's chunks as they come, raising `OverLimit` once one event (what comes
    between two blank lines, which a reader holds until the event ends) passes
    `limit_bytes`; the stream itself may go on as long as its events stay small. Positions
    count from the stream's start; a blank line split across two reads is found with the
    byte before."""
    read, ended, last = 0, 0, b""  # bytes read, where the last event ended, the byte before
    async for chunk in chunks:
        start = read - len(last)  # where `window` begins in the stream
        window = last + chunk
        for blank in BLANK_LINE.finditer(window):
            if start + blank.end() <= ended:
                continue  # found in the read before
            if start + blank.start() - ended > limit_bytes:
                raise OverLimit(f"an event over {limit_bytes} bytes")
            ended = start + blank.end()
        read += len(chunk)
        if read - ended > limit_bytes:
            raise OverLimit(f"an event over {limit_bytes} bytes")
        last = chunk[-1:]
        yield chunk


def codings(encoding: str) -> list[str]:
    """The codings of a Content-Encoding that `inflated` unpacks, in the order they were
    applied (httpx joins several header lines with commas); identity and the codings no
    decoder here knows are passed over, as httpx passes them over."""
    return [c for part in encoding.split(",") if (c := part.strip().lower()) in WBITS]


async def inflated(raw: AsyncIterable[bytes], encoding: str) -> AsyncGenerator[bytes, None]:
    """A gzip or deflate body, unpacked `PIECE` bytes at a time however small its packed
    chunks: an HTTP client's own decoder unpacks a whole read at once, and 10 KiB of a
    bomb read together make 10 MiB. Deflate is taken with its zlib header or without one,
    as HTTP clients take it; a gzip body of several members (RFC 1952) is unpacked whole.
    A body that does not unpack raises httpx's DecodingError, and so does one that goes on
    past its end by more than TRAILING_MAX bytes (ignored up to that: some servers pad):
    zlib keeps what follows the end, copying it whole at each read, and a body that is all
    trailing bytes would otherwise be read for ever."""
    wbits = WBITS[encoding.strip().lower()]
    inflate, started, trailing = zlib.decompressobj(wbits), False, 0
    async for chunk in raw:
        data = chunk
        while data:
            if inflate.eof:  # a gzip member ended: another may follow (RFC 1952), after
                rest = data.lstrip(b"\0")  # zero padding; anything else is counted only
                trailing += len(data) - len(rest)
                if rest and wbits & 16 and rest.startswith(GZIP_MAGIC[: len(rest)]):
                    inflate, data = zlib.decompressobj(wbits), rest
                    continue
                trailing += len(rest)
                if trailing > TRAILING_MAX:
                    why = f"the body goes on past its end ({encoding})"
                    raise httpx.DecodingError(why)
                break
            try:
                piece = inflate.decompress(data, PIECE)
            except zlib.error as exc:
                if started or wbits != zlib.MAX_WBITS:
                    why = f"the body does not unpack ({encoding}): {exc}"
                    raise httpx.DecodingError(why) from exc
                inflate, wbits = zlib.decompressobj(-zlib.MAX_WBITS), -zlib.MAX_WBITS
                continue  # deflate without the zlib header, from its first byte
            started = True
            if piece:
                yield piece
            data = inflate.unconsumed_tail or inflate.unused_data
    rest = inflate.flush()  # what a last step held back (a few bytes)
    if rest:
        yield rest


def decoded(response: httpx.Response) -> AsyncIterator[bytes]:
    """A streamed response's body, unpacked a piece at a time when gzip or deflate, layer
    after layer when it names several ("gzip, gzip": each layer a piece at a time, where
    httpx's decoder unpacks each read whole, layer after layer), else as httpx decodes
    it."""
    applied = codings(response.headers.get("content-encoding", ""))
    if not applied:
        return response.aiter_bytes()
    if len(applied) > CODINGS_MAX:  # each a generator over the last: thousands recursed
        raise httpx.DecodingError(f"more than {CODINGS_MAX} content codings")
    body: AsyncIterator[bytes] = response.aiter_raw()
    for coding in reversed(applied):  # the last applied is undone first
        body = inflated(body, coding)
    return body


async def body_within(response: httpx.Response, limit_bytes: int) -> bytes | None:
    """The body of a streamed response, decoded, or None once it passes `limit_bytes`."""
    try:
        return b"".join([chunk async for chunk in within(decoded(response), limit_bytes)])
    except OverLimit:
        return None
