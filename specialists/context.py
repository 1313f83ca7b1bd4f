"""Reading a run's shared context from a specialist, through the hub's REST API.

Specialists have no access to the hub's keys in Redis (least privilege), so they read the
whiteboard the way an operator does: `GET /v1/runs/{id}/context?tag=&source=`.
"""

from __future__ import annotations

from typing import Any

import httpx


class ContextReader:
    """The HTTP client is made on the first read: making one loads the system's CA
    certificates (20-45 ms on the project's 2-core machine), which a specialist that never
    reads the context, or a process starting fifty of them, should not pay."""

    def __init__(self, api_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> None:
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._api_url, self._timeout_s = api_url, timeout_s
        self._made: httpx.AsyncClient | None = None

    @property
    def _client(self) -> httpx.AsyncClient:
        if self._made is None:
            self._made = httpx.AsyncClient(
                base_url=self._api_url, headers=self._headers, timeout=self._timeout_s
            )
        return self._made

    async def entries(
        self, run_id: str, *, tag: str | None = None, source: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """Every entry `{value, source, timestamp, tags, metadata}` by key, filtered."""
        params = {k: v for k, v in (("tag", tag), ("source", source)) if v is not None}
        response = await self._client.get(f"/v1/runs/{run_id}/context", params=params)
        response.raise_for_status()
        entries: dict[str, dict[str, Any]] = response.json()["entries"]
        return entries

    async def aclose(self) -> None:
        if self._made is not None:
            await self._made.aclose()
