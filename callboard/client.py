"""A small client of the hub's REST API for the CLI: JSON in and out, server-sent events.

Refusals (4xx/5xx) raise ApiError with the hub's `detail`; a hub that cannot be reached
raises Unreachable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


class ApiError(Exception):
    """The hub refused a request; `detail` is its reason, `body` the whole JSON error."""

    def __init__(self, status: int, detail: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail
        self.body = body or {}


class Unreachable(Exception):
    """No hub answered at the URL."""


class Client:
    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, timeout_s: float = 30.0):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Unreachable(f"no hub at {self.url}: {exc}") from None
        return _answer(response)

    # -- the calls the CLI makes ---------------------------------------------------------
    def submit(self, text: str, content_type: str = "application/yaml") -> dict[str, Any]:
        stored: dict[str, Any] = self.request(
            "POST", "/v1/cuelists", content=text.encode(), headers={"Content-Type": content_type}
        )
        return stored

    def start_run(
        self,
        cuelist: str,
        *,
        version: str | None = None,
        params: dict[str, Any] | None = None,
        dry: bool = False,
        idempotency_key: str | None = None,
    ) -> str:
        body = {"cuelist": cuelist, "version": version, "params": params or {}, "dry": dry}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return str(self.request("POST", "/v1/runs", json=body, headers=headers)["run_id"])

    def run(self, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self.request("GET", f"/v1/runs/{run_id}")
        return run

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.request("GET", "/v1/runs", params={"limit": limit})[
            "data"
        ]
        return runs

    def go(self, run_id: str, cue_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/v1/runs/{run_id}/cues/{cue_id}/go")
        return result

    def agents(self) -> list[dict[str, Any]]:
        agents: list[dict[str, Any]] = self.request("GET", "/v1/agents")["data"]
        return agents

    def healthy(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def events(self, run_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """The run's server-sent events as (event name, data) until the hub ends the stream."""
        try:
            with self.http.stream(
                "GET", f"/v1/runs/{run_id}/events", timeout=httpx.Timeout(30.0, read=None)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    _answer(response)
                yield from parse_sse(response.iter_lines())
        except httpx.TransportError as exc:
            raise Unreachable(f"event stream from {self.url} broke: {exc}") from None


def parse_sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Minimal text/event-stream parsing: `event:` and `data:` fields, blank line ends one."""
    name, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", list[str]()
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def _answer(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text[:500]}
    if response.status_code >= 400:
        detail = body.get("detail") if isinstance(body, dict) else None
        raise ApiError(response.status_code, str(detail or response.reason_phrase), body)
    return body
