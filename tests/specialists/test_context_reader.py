"""The SDK's context reader: `GET /v1/runs/{id}/context` on the hub's API, with the
agent's key; its HTTP client is made on the first read, and closing works either way."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from specialists.context import ContextReader
from tests.webserver import Answer, Request, serving


async def test_a_reader_reads_the_runs_context_with_its_key_and_filters() -> None:
    asked: list[Request] = []
    entries = {"build_id": {"value": 7, "source": "builder", "tags": ["build"]}}

    def api(request: Request) -> Answer:
        asked.append(request)
        return Answer(200, json.dumps({"entries": entries}).encode(), "application/json")

    with serving(api) as url:
        reader = ContextReader(url, api_key="k-123")
        try:
            assert await reader.entries("run-1", tag="build") == entries
            assert await reader.entries("run-1") == entries  # the same client, again
        finally:
            await reader.aclose()
    assert [r.path for r in asked] == ["/v1/runs/run-1/context?tag=build", "/v1/runs/run-1/context"]
    assert {r.headers["authorization"] for r in asked} == {"Bearer k-123"}


async def test_the_http_client_is_made_on_the_first_read_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Making an httpx client loads the CA certificates (about 25-45 ms): a specialist that
    never reads the context, or a process starting fifty agents, does not pay it."""
    made: list[httpx.AsyncClient] = []
    real = httpx.AsyncClient

    def counted(*args: Any, **kwargs: Any) -> httpx.AsyncClient:
        client = real(*args, **kwargs)
        made.append(client)
        return client

    monkeypatch.setattr(httpx, "AsyncClient", counted)
    idle = ContextReader("http://127.0.0.1:9")
    await idle.aclose()  # never read: nothing was made, nothing to close
    assert made == []

    def api(request: Request) -> Answer:
        return Answer(200, b'{"entries": {}}', "application/json")

    with serving(api) as url:
        reader = ContextReader(url)
        assert made == []
        try:
            assert await reader.entries("run-1") == {}
            assert await reader.entries("run-2") == {}
            assert len(made) == 1
        finally:
            await reader.aclose()
    assert made[0].is_closed
