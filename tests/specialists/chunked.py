"""Test servers that answer without measure: a chunked HTTP body written a chunk at a time,
counting what reached the socket before the client went away, and gzip on the way."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterable, Iterator


class Chunked:
    """Base of a hostile test server: `sent` counts the body bytes written to the socket,
    `done` is set once an answer ended (sent whole, or the client went)."""

    def __init__(self) -> None:
        self.sent = 0
        self.done = asyncio.Event()

    async def send(
        self, writer: asyncio.StreamWriter, kind: bytes, chunks: Iterable[bytes],
        *, extra: bytes = b"", pause_s: float = 0.0,
    ) -> None:  # fmt: skip
        """A 200 of content type `kind` (and `extra` header lines), its body `chunks`, a
        chunk every `pause_s` (the drip's pace, not a wait for anything)."""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%sTransfer-Encoding: chunked\r\n"
                     b"Connection: close\r\n\r\n" % (kind, extra))  # fmt: skip
        for chunk in chunks:
            if not chunk:
                continue
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            self.sent += len(chunk)
            if pause_s:
                await asyncio.sleep(pause_s)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def gzipped(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """`chunks` gzipped on the way: 64 MiB of one byte is 64 KiB on the wire."""
    gzip = zlib.compressobj(wbits=31)
    yield from map(gzip.compress, chunks)
    yield gzip.flush()
