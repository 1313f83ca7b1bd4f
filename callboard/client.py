"""A small client of the hub's REST API for the CLI: JSON in and out, server-sent events.

Refusals (4xx/5xx) raise ApiError with the hub's `detail`; a hub that cannot be reached
raises Unreachable; an answer that is not the API's (a login page, another server on the
port, a body without the fields the route documents) raises BadAnswer, never a success.
Every request that changes a run, an escalation or the agents (a start, GO, retry, rerun,
condition, cancel, budget, resolve, broadcast) carries an `Idempotency-Key` (given, or one
of its own) and is sent again with it, up to TRIES times, when the hub answers 503 or the
connection fails: the hub does it once however many times it is sent. When the last try
may have reached the hub unanswered (a read timeout, a 503 "still being served"), the
outcome is unknown: OutcomeUnknown carries the key to send it again with.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from callboard.profiles import DEFAULT_URL

TRIES = 3  # sends of one keyed request: the first and two more after a 503 or a lost link
WAIT_S = 1.0  # between sends, unless the hub's Retry-After says (capped at MAX_WAIT_S)
MAX_WAIT_S = 5.0


class ApiError(Exception):
    """The hub refused a request; `detail` is its reason, `body` the whole JSON error,
    `retry_after_s` what a 503 asked the client to wait."""

    def __init__(
        self, status: int, detail: str, body: dict[str, Any] | None = None,
        retry_after_s: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail
        self.body = body or {}
        self.retry_after_s = retry_after_s


class Unreachable(Exception):
    """No hub answered at the URL."""


class BadAnswer(Exception):
    """Something answered, but not as the hub's API does (not JSON, or not its shape)."""


class OutcomeUnknown(Exception):
    """A keyed command was sent but never answered: it may or may not have taken effect;
    sending it again with `key` does it at most once."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


# Failures after which a request may have reached the hub (it was written, then the answer
# never came); before any of these nothing was sent.
MAYBE_SENT = (httpx.ReadError, httpx.ReadTimeout, httpx.WriteError, httpx.WriteTimeout,
              httpx.RemoteProtocolError)  # fmt: skip


class Client:
    """One method per route of the hub's API (routes.py maps each route to its command)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )

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

    def command(self, path: str, key: str | None = None, **kwargs: Any) -> Any:
        """POST a request that changes state, with an Idempotency-Key (`key`, or a new one):
        sent again with the same key after a 503 or a failed connection, up to TRIES."""
        key = key or uuid.uuid4().hex
        headers = {**kwargs.pop("headers", {}), "Idempotency-Key": key}
        maybe_done = False  # some try may have reached the hub without an answer
        for sent in range(1, TRIES + 1):
            try:
                response = self.http.post(path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                maybe_done = maybe_done or isinstance(exc, MAYBE_SENT)
                if sent == TRIES:
                    if maybe_done:
                        raise OutcomeUnknown(
                            f"{self.url} did not answer ({exc or type(exc).__name__})", key
                        ) from None
                    raise Unreachable(f"no hub at {self.url}: {exc}") from None
                wait_s = WAIT_S
            else:
                if response.status_code != 503 or sent == TRIES:
                    try:
                        return _answer(response)
                    except ApiError as refused:
                        if refused.status == 503 or (refused.status >= 500 and maybe_done):
                            # a 503 may be "still being served": the command may yet land
                            raise OutcomeUnknown(
                                f"{self.url} answered {refused.status}: {refused.detail}", key
                            ) from None
                        raise
                wait_s = _retry_after(response)
            time.sleep(wait_s)
        raise AssertionError("unreachable: the last send returns or raises")

    # -- cuelists --------------------------------------------------------------------------
    def submit(self, text: str, content_type: str = "application/yaml") -> dict[str, Any]:
        return _dict(
            self.request(
                "POST", "/v1/cuelists", content=text.encode(),
                headers={"Content-Type": content_type},
            ), "name", "version",
        )  # fmt: skip

    def check(
        self, text: str, content_type: str = "application/yaml", strict: bool = False
    ) -> dict[str, Any]:
        """POST /v1/cuelists/validate: the hub's checks, nothing stored."""
        return _dict(
            self.request(
                "POST", "/v1/cuelists/validate", content=text.encode(),
                headers={"Content-Type": content_type}, params={"strict": strict},
            ), "valid",
        )  # fmt: skip

    def cuelists(self) -> dict[str, Any]:
        return _dict(self.request("GET", "/v1/cuelists"), "data")

    def cuelist(self, name: str) -> dict[str, Any]:
        return _dict(self.request("GET", f"/v1/cuelists/{_seg(name)}"), "name", "versions")

    def delete_cuelist(self, name: str, version: str | None = None) -> dict[str, Any]:
        params = {"version": version} if version else {}
        answer = self.request("DELETE", f"/v1/cuelists/{_seg(name)}", params=params)
        return _dict(answer, "name", "deleted")

    def schedule(self, name: str, action: str) -> dict[str, Any]:
        """`pause` or `resume` the cuelist's schedule."""
        return _dict(self.request("POST", f"/v1/cuelists/{_seg(name)}/schedule/{action}"), "name")

    # -- runs ------------------------------------------------------------------------------
    def start_run(
        self,
        cuelist: str,
        *,
        version: str | None = None,
        params: dict[str, Any] | None = None,
        dry: bool = False,
        idempotency_key: str | None = None,
        budget: dict[str, Any] | None = None,
    ) -> str:
        body = {"cuelist": cuelist, "version": version, "params": params or {}, "dry": dry}
        if budget:
            body["budget"] = budget
        return str(_dict(self.command("/v1/runs", idempotency_key, json=body), "run_id")["run_id"])

    def run(self, run_id: str) -> dict[str, Any]:
        return _dict(self.request("GET", f"/v1/runs/{_seg(run_id)}"), "run_id", "status", "cues")

    def runs_page(
        self, limit: int = 20, cuelist: str | None = None, status: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit}
        if cuelist:
            params["cuelist"] = cuelist
        if status:
            params["status"] = status
        return _dict(self.request("GET", "/v1/runs", params=params), "data")

    def runs(self, limit: int = 20) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.runs_page(limit)["data"]
        return runs

    # Each command takes `key`, its Idempotency-Key (None: a new one per call).
    def go(self, run_id: str, cue_id: str, key: str | None = None) -> dict[str, Any]:
        path = f"/v1/runs/{_seg(run_id)}/cues/{_seg(cue_id)}/go"
        return _dict(self.command(path, key), "state", "attempt")

    def retry(self, run_id: str, cue_id: str, key: str | None = None) -> dict[str, Any]:
        path = f"/v1/runs/{_seg(run_id)}/cues/{_seg(cue_id)}/retry"
        return _dict(self.command(path, key), "state", "attempt")

    def rerun(
        self, run_id: str, from_failure: bool = False, key: str | None = None
    ) -> dict[str, Any]:
        body = {"from_failure": from_failure}
        answer = self.command(f"/v1/runs/{_seg(run_id)}/rerun", key, json=body)
        return _dict(answer, "run_id", "rerun_of")

    def condition(self, run_id: str, name: str, key: str | None = None) -> dict[str, Any]:
        path = f"/v1/runs/{_seg(run_id)}/conditions/{_seg(name)}"
        return _dict(self.command(path, key), "conditions")

    def cancel(
        self, run_id: str, reason: str | None = None, key: str | None = None
    ) -> dict[str, Any]:
        body = {"reason": reason} if reason else None
        answer = self.command(f"/v1/runs/{_seg(run_id)}/cancel", key, json=body)
        return _dict(answer, "run_id", "status")

    def budget(self, run_id: str, limits: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        answer = self.command(f"/v1/runs/{_seg(run_id)}/budget", key, json=limits)
        return _dict(answer, "run_id", "status")

    def context(
        self, run_id: str, tag: str | None = None, source: str | None = None
    ) -> dict[str, Any]:
        params = {k: v for k, v in (("tag", tag), ("source", source)) if v}
        answer = self.request("GET", f"/v1/runs/{_seg(run_id)}/context", params=params)
        return _dict(answer, "entries")

    # -- agents, escalations, broadcasts, wiring, dead letters, health, metrics --------------
    def agents_page(self) -> dict[str, Any]:
        return _dict(self.request("GET", "/v1/agents"), "data")

    def agent_card(self, agent: str) -> dict[str, Any]:
        return _dict(self.request("GET", f"/v1/agents/{_seg(agent)}/card"), "name")

    def agents(self) -> list[dict[str, Any]]:
        agents: list[dict[str, Any]] = self.agents_page()["data"]
        return agents

    def escalations(
        self, status: str | None = None, run_id: str | None = None, limit: int = 200
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        if run_id:
            params["run_id"] = run_id
        return _dict(self.request("GET", "/v1/escalations", params=params), "data")

    def resolve(
        self, esc_id: str, winner: str | None = None, note: str | None = None,
        answer: str | None = None, key: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        pairs = (("winner", winner), ("note", note), ("answer", answer))
        body = {k: v for k, v in pairs if v}
        path = f"/v1/escalations/{_seg(esc_id)}/resolve"
        return _dict(self.command(path, key, json=body), "id", "status")

    def broadcast(
        self, message_type: str, payload: dict[str, Any], key: str | None = None
    ) -> dict[str, Any]:
        body = {"message_type": message_type, "payload": payload}
        return _dict(self.command("/v1/broadcasts", key, json=body), "sent")

    def wiring(self) -> dict[str, Any]:
        return _dict(self.request("GET", "/v1/wiring"))

    def wiring_mermaid(self) -> str:
        return self._text("/v1/wiring", params={"format": "mermaid"})

    def deadletters(self, limit: int = 100, before: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit}
        if before:
            params["before"] = before
        return _dict(self.request("GET", "/v1/deadletters", params=params), "data")

    def health(self) -> tuple[int, dict[str, Any]]:
        """GET /healthz: (status code, body); the hub's 503 (its JSON health) is an answer
        here, not a refusal; a proxy's 503 page is a refusal."""
        try:
            response = self.http.get("/healthz")
        except httpx.TransportError as exc:
            raise Unreachable(f"no hub at {self.url}: {exc}") from None
        fields = ("status", "hub_id", "leader", "redis")
        if response.status_code == 503:
            body = _json(response)
            if isinstance(body, dict) and all(k in body for k in fields):
                return 503, body
        return response.status_code, _dict(_answer(response), *fields)

    def healthy(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def metrics(self) -> str:
        return self._text("/metrics")

    def _text(self, path: str, **kwargs: Any) -> str:
        """A text answer (metrics, a Mermaid chart): text/plain, never a page."""
        try:
            response = self.http.get(path, **kwargs)
        except httpx.TransportError as exc:
            raise Unreachable(f"no hub at {self.url}: {exc}") from None
        if response.status_code >= 400:
            _answer(response)
        if not response.headers.get("content-type", "").startswith("text/plain"):
            raise BadAnswer(_not_the_api(response))
        return response.text

    def events(
        self, run_id: str, last_event_id: str | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """The run's server-sent events as (event name, data) until the hub ends the stream."""
        for _id, name, data in self.event_entries(run_id, last_event_id):
            yield name, data

    def event_entries(
        self, run_id: str, last_event_id: str | None = None
    ) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
        """Like `events`, with each event's id (for Last-Event-ID)."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        try:
            with self.http.stream(
                "GET", f"/v1/runs/{_seg(run_id)}/events", headers=headers,
                timeout=httpx.Timeout(30.0, read=None),
            ) as response:  # fmt: skip
                if response.status_code >= 400:
                    response.read()
                    _answer(response)
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    response.read()
                    raise BadAnswer(_not_the_api(response))
                try:
                    yield from parse_sse_entries(response.iter_lines())
                except ValueError:
                    raise BadAnswer(f"{self.url} sent an event that is not JSON") from None
        except httpx.TransportError as exc:
            raise Unreachable(f"event stream from {self.url} broke: {exc}") from None


def _retry_after(response: httpx.Response) -> float:
    """How long the hub asked to wait before the next send (Retry-After, in seconds)."""
    try:
        return min(max(float(response.headers.get("Retry-After", WAIT_S)), 0.0), MAX_WAIT_S)
    except ValueError:  # an HTTP date, or nonsense: the default
        return WAIT_S


def _seg(value: str) -> str:
    """One path segment: a `/` or `?` in a name must not change the route."""
    return quote(value, safe="")


def _dict(body: Any, *fields: str) -> dict[str, Any]:
    """The answer, if it is a JSON object with the `fields` its route documents."""
    if not isinstance(body, dict):
        raise BadAnswer(f"the hub's API answers a JSON object, not {type(body).__name__}")
    missing = [f for f in fields if f not in body]
    if missing:
        raise BadAnswer(f"the answer lacks {', '.join(missing)}: not the hub's API?")
    return body


def parse_sse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Minimal text/event-stream parsing: `event:` and `data:` fields, blank line ends one."""
    for _id, name, data in parse_sse_entries(lines):
        yield name, data


def parse_sse_entries(lines: Iterator[str]) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """(id, event name, data) per event; `id:` is what a client resumes from."""
    entry_id: str | None = None
    name, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield entry_id, name, json.loads("\n".join(data))
            entry_id, name, data = None, "message", list[str]()
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line.startswith("id:"):
            entry_id = line[3:].strip()


def _json(response: httpx.Response) -> Any:
    """The body as JSON, or None when it is not JSON (a page, a plain-text error)."""
    try:
        return response.json()
    except ValueError:
        return None


def _not_the_api(response: httpx.Response) -> str:
    kind = _kind(response)
    start = " ".join(response.text[:60].split())
    where = response.url.copy_with(query=None, fragment=None)
    return (
        f"{where} answered {response.status_code} with {kind} ({start!r}...), "
        "not the hub's API: is the URL right?"
    )


def _answer(response: httpx.Response) -> Any:
    """A success's JSON body; a refusal raises ApiError, an answer that is not JSON (a
    proxy's page, a server that is not the hub) BadAnswer or, for 4xx/5xx, ApiError."""
    body = _json(response)
    if response.status_code >= 400:
        if not isinstance(body, dict):  # a proxy's or a server's error page: its status only
            detail = f"{response.reason_phrase} (a {_kind(response)} page, not the hub's answer)"
            raise ApiError(response.status_code, detail, None, _retry_after(response))
        reason = body.get("detail")
        raise ApiError(
            response.status_code, str(reason or response.reason_phrase), body,
            _retry_after(response),
        )  # fmt: skip
    if body is None:
        raise BadAnswer(_not_the_api(response))
    return body


def _kind(response: httpx.Response) -> str:
    return str(response.headers.get("content-type", "untyped")).split(";")[0]
