"""What a hostile A2A client sends as a JSON-RPC body, against a real hub process: a body
nested past what Python's parser takes got an Internal error (-32603) and a traceback in
the hub's log for each request (the SDK's dispatcher caught the RecursionError as a crash);
it gets the Parse error (-32700) any other unparseable body gets, nothing is logged as an
error, and the binding goes on answering."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes

pytestmark = pytest.mark.redis
RPC = "/a2a/jsonrpc"


def _request(params: str) -> str:
    return f'{{"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {params}}}'


async def test_a_body_nested_too_deep_is_a_parse_error_and_logs_no_traceback(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    with processes(child_env(redis_server), tmp_path) as procs:
        url = procs.hub()
        headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
        async with httpx.AsyncClient(base_url=url, timeout=30) as api:
            for depth in (300, 940, 5_000, 200_000):  # past DEPTH_MAX, around and past the
                # recursion limit (940: the SDK's parser failed there, ours did not), 400 KB
                deep = _request("[" * depth + "]" * depth)
                r = await api.post(RPC, content=deep, headers=headers)
                assert r.status_code == 200, r.text  # JSON-RPC answers its errors in the body
                assert r.json()["error"]["code"] == -32700, r.text
                assert r.json()["id"] is None
            # an ordinary parse error, and a request with many brackets that is not deep,
            # still reach the SDK as before
            r = await api.post(RPC, content=b"{not json", headers=headers)
            assert r.json()["error"]["code"] == -32700
            wide = _request('{"pageSize": 5, "x": [' + ",".join(["[]"] * 500) + "]}")
            r = await api.post(RPC, content=wide, headers=headers)
            assert "error" in r.json() or "result" in r.json()
            assert r.json().get("error", {}).get("code") != -32700, r.text
            r = await api.post(RPC, content=_request("{}"), headers=headers)
            assert "result" in r.json(), r.text
        log = _hub_log(tmp_path)
        assert "RecursionError" not in log
        assert "Traceback" not in log


def _hub_log(log_dir: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("hub*.log")))
