"""Reading remote answers no further than a message (specialists.builtin.bounded): an event
stream bounded per event, wherever its blank lines fall between reads, and gzip or deflate
unpacked a piece at a time however much one read holds."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterable
from itertools import pairwise

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specialists.builtin.bounded import (
    PIECE,
    TRAILING_MAX,
    OverLimit,
    body_within,
    decoded,
    events_within,
    inflated,
)


async def _chunks(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _read(stream: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in stream]


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    at = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(at)]


@given(
    events=st.lists(st.integers(1, 90), min_size=1, max_size=30),
    ending=st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
async def test_a_stream_of_small_events_passes_whole_however_it_is_read(
    events: list[int], ending: bytes, cuts: list[int]
) -> None:
    """Events of up to 100 bytes under a 100-byte limit: thousands of bytes in all pass,
    whatever reads the blank lines are split across."""
    stream = b"".join(b"data: " + b"x" * (n - 6 if n > 6 else 0) + ending for n in events)
    got = await _read(events_within(_chunks(_cut(stream, cuts)), 100))
    assert b"".join(got) == stream


@given(cuts=st.lists(st.integers(0, 10_000), max_size=12))
async def test_one_event_past_the_limit_stops_the_stream(cuts: list[int]) -> None:
    stream = b"data: small\n\n" + b"data: " + b"x" * 200 + b"\n\ndata: never read\n\n"
    with pytest.raises(OverLimit):
        await _read(events_within(_chunks(_cut(stream, cuts)), 100))


@pytest.mark.parametrize(
    ("encoding", "wbits"),
    [("gzip", zlib.MAX_WBITS | 16), ("deflate", zlib.MAX_WBITS), ("deflate", -zlib.MAX_WBITS)],
)
async def test_a_packed_body_unpacks_a_piece_at_a_time(encoding: str, wbits: int) -> None:
    """16 MiB packed into a few KiB, read in one chunk: no piece is bigger than PIECE (httpx's
    own decoder makes the whole 16 MiB at once). Deflate comes with or without its header."""
    pack = zlib.compressobj(wbits=wbits)
    body = pack.compress(b"x" * (16 * 2**20)) + pack.flush()
    assert len(body) < 64 * 1024
    pieces = await _read(inflated(_chunks([body]), encoding))
    assert max(map(len, pieces)) <= PIECE
    assert sum(map(len, pieces)) == 16 * 2**20


async def test_a_gzip_bomb_is_read_no_further_than_the_limit() -> None:
    pack = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    body = pack.compress(b"x" * (16 * 2**20)) + pack.flush()
    headers = {"content-encoding": "gzip"}
    fine = zlib.compress(b'{"ok": true}', wbits=zlib.MAX_WBITS | 16)
    fine_answer = httpx.Response(200, headers=headers, stream=httpx.ByteStream(fine))
    bomb = httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))
    assert await body_within(fine_answer, 1024) == b'{"ok": true}'
    assert await body_within(bomb, 2**20) is None


async def test_a_body_that_does_not_unpack_is_a_decoding_error() -> None:
    with pytest.raises(httpx.DecodingError, match="does not unpack"):
        await _read(inflated(_chunks([b"not gzip at all"]), "gzip"))


def _packed(data: bytes, *layers: int) -> bytes:
    for wbits in layers:
        pack = zlib.compressobj(wbits=wbits)
        data = pack.compress(data) + pack.flush()
    return data


@pytest.mark.parametrize("header", ["gzip, gzip", "identity, gzip, gzip", "gzip,  GZIP"])
async def test_a_body_packed_twice_unpacks_a_piece_at_a_time_layer_after_layer(
    header: str,
) -> None:
    """`Content-Encoding: gzip, gzip` (or two header lines, which httpx joins) fell back to
    httpx's decoder, which unpacks each read whole, layer after layer: 1.8 KiB on the wire
    took the specialist to 2.1 GB. Each layer now unpacks a piece at a time."""
    gz = zlib.MAX_WBITS | 16
    body = _packed(b"x" * (16 * 2**20), gz, gz)
    assert len(body) < 4096
    answer = httpx.Response(200, headers={"content-encoding": header}, stream=_stream(body))
    pieces = await _read(decoded(answer))
    assert max(map(len, pieces)) <= PIECE and sum(map(len, pieces)) == 16 * 2**20
    bomb = httpx.Response(200, headers={"content-encoding": header}, stream=_stream(body))
    assert await body_within(bomb, 2**20) is None


async def test_bytes_past_the_end_of_a_packed_body_are_refused_past_a_few() -> None:
    """A 32-byte gzip of `{"ok": true}`, then 50 MiB of zeros: the zeros were never
    counted (zlib keeps them aside, copying them whole at each read: 12 s of CPU), and the
    cue succeeded with `{"ok": true}`; endless zeros were read for ever. A few bytes of
    padding are still taken."""
    fine = _packed(b'{"ok": true}', zlib.MAX_WBITS | 16)
    padded = httpx.Response(
        200, headers={"content-encoding": "gzip"}, stream=_stream(fine + b"\0" * TRAILING_MAX)
    )
    assert await body_within(padded, 1024) == b'{"ok": true}'

    async def endless() -> AsyncIterator[bytes]:
        yield fine
        while True:
            yield b"\0" * 65536

    with pytest.raises(httpx.DecodingError, match="past its end"):
        await _read(inflated(endless(), "gzip"))


def _stream(body: bytes) -> httpx.AsyncByteStream:
    return httpx.ByteStream(body)


async def test_a_gzip_body_of_several_members_is_unpacked_whole() -> None:
    """RFC 1952 lets a gzip body hold several members, as Python's gzip reads them: the
    second member (packed small) was cut off as trailing bytes, the answer a success."""
    gz = zlib.MAX_WBITS | 16
    body = _packed(b"first " * 10, gz) + _packed(b"second " * 1000, gz) + b"\0" * 8
    pieces = await _read(inflated(_chunks(_cut(body, [5, 40, 41, 70])), "gzip"))
    assert b"".join(pieces) == b"first " * 10 + b"second " * 1000


async def test_more_content_codings_than_a_few_are_refused() -> None:
    """3,000 `gzip` layers named in 15 KB of header made a generator over each: the read
    ended in a RecursionError, not a decoding error."""
    header = ", ".join(["gzip"] * 3000)
    answer = httpx.Response(200, headers={"content-encoding": header}, stream=_stream(b"x"))
    with pytest.raises(httpx.DecodingError, match="content codings"):
        await _read(decoded(answer))
