"""Row 12: hostile bodies against a live hub. A 10 MB body gets 413 before it is read (by
Content-Length) or once 1 MiB has streamed in (chunked); deeply nested JSON and YAML, YAML
alias bombs, Python tags, an oversized cuelist and Unicode / control characters in ids each
get a clear 4xx with a `detail`. The hub's memory and /healthz latency are unharmed."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from protocols.cuelist import MAX_CUES
from tests.e2e.procs import Procs, child_env
from tests.faults.conftest import Figure
from tests.faults.tools import healthz_latency_ms, rss_kib

pytestmark = pytest.mark.slow

KEY = "faults-key-0123456789"
MB = 1024 * 1024
BODY_LIMIT = MB
JSON, YAML = "application/json", "application/yaml"
RSS_GROWTH_LIMIT_MIB = 64
BOMB = "\n".join(
    [f"l0: &l0 [{', '.join(['lol'] * 9)}]"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
)


def _cuelist(cue_id: str = "A", agent: str = "agent-a", name: str = "hostile") -> dict[str, Any]:
    return {"cuelist": name, "cues": [{"id": cue_id, "target_agents": [agent]}]}


CASES: list[tuple[str, str, str, bytes | dict[str, Any]]] = [
    # (label, path, content type, body)
    ("nested JSON (100k arrays)", "/v1/cuelists", JSON, b"[" * 100_000 + b"]" * 100_000),
    ("nested JSON run params", "/v1/runs", JSON,
     b'{"cuelist": "x", "params": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001),
    ("nested YAML", "/v1/cuelists", YAML, b"a: " + b"[" * 50_000 + b"]" * 50_000),
    ("YAML alias bomb (9^9)", "/v1/cuelists", YAML, BOMB.encode()),
    ("YAML python tag", "/v1/cuelists", YAML,
     b"cuelist: x\ncues: !!python/object/apply:os.system ['touch /tmp/callboard-pwned']\n"),
    ("YAML python name tag", "/v1/cuelists", YAML, b"cuelist: !!python/name:os.system\n"),
    (f"{MAX_CUES + 1:,}-cue cuelist", "/v1/cuelists", JSON,
     {"cuelist": "big", "cues": [{"id": f"C{i}", "target_agents": ["a"]}
                                 for i in range(MAX_CUES + 1)]}),
    ("NUL in a cue id", "/v1/cuelists", JSON, _cuelist("CUE\x00X")),
    ("RTL override in a cue id", "/v1/cuelists", JSON, _cuelist("CUE\u202eX")),
    ("newline in a cue id", "/v1/cuelists", JSON, _cuelist("A\nB")),
    ("emoji cue id", "/v1/cuelists", JSON, _cuelist("\U0001f4a5")),
    ("control chars in an agent id", "/v1/cuelists", JSON, _cuelist(agent="ag\x07\x1b[31m")),
    ("NUL in a cuelist name", "/v1/cuelists", JSON, _cuelist(name="x\x00")),
    ("lone surrogate", "/v1/cuelists", JSON, b'{"cuelist": "\\ud800", "cues": []}'),
    ("invalid UTF-8", "/v1/cuelists", YAML, b"cuelist: \xff\xfe\n"),
]  # fmt: skip


@pytest.fixture
def hub(redis_server: EmbeddedServer, tmp_path: Path) -> Iterator[tuple[str, int]]:
    procs = Procs(child_env(redis_server, CALLBOARD_API_KEY=KEY), tmp_path)
    try:
        url = procs.hub()
        yield url, procs.procs[-1].pid
    finally:
        procs.stop()


def _upload(url: str, size: int, chunked: bool) -> tuple[int, int]:
    """POST `size` bytes; (status, body bytes sent before the reply came). With a
    Content-Length, nothing of the body is sent until the server has answered."""
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/cuelists HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/yaml\r\n"
        + ("Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {size}\r\n")
        + "\r\n"
    )
    piece = b"x" * 65536
    frame = f"{len(piece):x}\r\n".encode() + piece + b"\r\n" if chunked else piece
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        sock.sendall(head.encode())
        deadline = time.monotonic() + 30
        while sent < size and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock] if chunked else [], [], 5)
            if readable:
                break
            if writable:
                try:
                    sock.sendall(frame)
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += len(piece)
        try:
            reply = sock.recv(4096)
        except ConnectionResetError:
            reply = b""
    assert reply.startswith(b"HTTP/1.1 "), reply[:100]
    return int(reply.split()[1]), sent


def test_hostile_bodies_get_a_clear_4xx_and_leave_the_hub_unharmed(
    hub: tuple[str, int], figure: Figure
) -> None:
    url, pid = hub
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    api.post("/v1/cuelists/validate", json=_cuelist())  # warm up every code path once
    rss_before, latency_before = rss_kib(pid), healthz_latency_ms(url)
    outcomes: dict[str, int] = {}
    details_ok = True
    for label, path, media, body in CASES:
        content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
        response = api.post(path, content=content, headers={"Content-Type": media})
        outcomes[label] = response.status_code
        details_ok = details_ok and isinstance(response.json().get("detail"), str)
    big_status, big_sent = _upload(url, 10 * MB, chunked=False)
    chunked_status, chunked_sent = _upload(url, 10 * MB, chunked=True)
    api.close()
    rss_after, latency_after = rss_kib(pid), healthz_latency_ms(url)
    growth_mib = (rss_after - rss_before) / 1024
    figure(
        row=12,
        fault="hostile bodies: 10 MB, nested JSON/YAML, alias bomb, Python tags, "
        f"{MAX_CUES + 1:,} cues, control/Unicode chars in ids",
        promise="each a clear 4xx with detail; 10 MB refused without buffering it; "
        "hub memory and latency unharmed",
        measured=f"10 MB: {big_status} after {big_sent // 1024} KiB sent (Content-Length), "
        f"{chunked_status} after {chunked_sent // 1024} KiB (chunked); others "
        f"{sorted(set(outcomes.values()))} for {len(outcomes)} bodies; RSS "
        f"{rss_before // 1024}->{rss_after // 1024} MiB; /healthz median "
        f"{latency_before:.1f}->{latency_after:.1f} ms",
        outcomes=outcomes,
    )
    assert big_status == 413 and big_sent == 0
    # the rest of what was sent sits in socket buffers, never read (RSS below says so)
    assert chunked_status == 413 and chunked_sent < 10 * MB
    assert all(400 <= code < 500 for code in outcomes.values()), outcomes
    assert details_ok
    assert not Path("/tmp/callboard-pwned").exists()
    assert growth_mib < RSS_GROWTH_LIMIT_MIB
    assert latency_after <= 2 * latency_before + 10
