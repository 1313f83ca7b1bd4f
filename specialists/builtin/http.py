"""The `http` specialist: POST the cue to a URL and report the JSON answer.

Action: `{url?, method?: POST, body?, headers?, timeout_s?}`. Without `body` it sends
`{run_id, cue_id, attempt, action, context}`. Connect errors and 5xx answers are retried
(bounded, with backoff); a 4xx or a 5xx after the last try fails the cue. The answer
(JSON, else text) goes to the shared context as `{cue_id}.response` and to the result.
`timeout_s` bounds each try whole (a server dripping its answer does not outlast it), and
an answer longer than one message may be (`max_message_bytes`) fails the cue unread.

Every try carries an `Idempotency-Key` header (the IETF httpapi draft's; callboard's own
API honours it), unless the action's `headers` set one: the same for every try of one
attempt of the cue, on whichever replica runs it (a GO delivered again after a replica
died mid-call included), and new for each attempt. A 5xx may come after the server did
the work; with the key, a server that honours it does it once.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from specialists.base import Specialist
from specialists.builtin.bounded import body_within
from specialists.cue import Cue, Result
from specialists.errors import Reject


class HttpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_HTTP_", extra="ignore")

    url: str | None = None  # used when the action names none
    timeout_s: float = 30.0
    tries: int = 3  # attempts on connect errors and 5xx
    backoff_s: float = 0.2  # first wait between tries; doubles, at most 5 s


class AnswerFailed(Exception):
    """The answer took too long to arrive whole, or was too long to report."""


class ServerError(Exception):
    """A 5xx answer: worth another try."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}: {response.text[-500:]}")
        self.response = response


def _transient(exc: BaseException) -> bool:
    # Only errors where the request surely did not run (or the server said so): a read
    # timeout after sending is not retried, the endpoint may not be idempotent.
    return isinstance(exc, (ServerError, httpx.ConnectError, httpx.ConnectTimeout))


async def _whole(response: httpx.Response, limit_bytes: int) -> httpx.Response:
    """The response with its body read, up to `limit_bytes` (`body_within`)."""
    body = await body_within(response, limit_bytes)
    if body is None:
        raise AnswerFailed(
            f"the answer from {response.url} is over the {limit_bytes}-byte limit of a "
            "message: not read further"
        )
    headers = [(k, v) for k, v in response.headers.items() if k != "content-encoding"]
    return httpx.Response(response.status_code, headers=headers, content=body,
                          request=response.request)  # fmt: skip


_KEYS = uuid.uuid5(uuid.NAMESPACE_URL, "urn:callboard:http:idempotency-key")


def idempotency_key(cue: Cue) -> str:
    """The `Idempotency-Key` of one attempt of the cue: a UUID derived from the run, the
    cue and the attempt (a GO outside any run: its message id), so every replica names it
    alike."""
    run = cue.run_id if cue.run_id is not None else f"message {cue.message.message_id}"
    return str(uuid.uuid5(_KEYS, f"{run}\x1f{cue.cue_id}\x1f{cue.attempt}"))


def _answer(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


class Http(Specialist):
    kind = "http"

    def __init__(self, *args: Any, http_settings: HttpSettings | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.http_settings = http_settings or HttpSettings()
        self.client: httpx.AsyncClient | None = None

    async def setup(self) -> None:
        hooks: dict[str, list[Any]] = {}
        if self.tracer is not None:  # W3C traceparent on every call (specialists.tracing)
            from specialists.tracing import request_hooks

            hooks = request_hooks(self.tracer)
        self.client = httpx.AsyncClient(timeout=self.http_settings.timeout_s, event_hooks=hooks)

    async def teardown(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def execute(self, cue: Cue) -> Result:
        assert self.client is not None, "setup() opens the client"
        action, conf = cue.action, self.http_settings
        url = action.get("url") or conf.url
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise Reject(f"no usable URL: set action.url or CALLBOARD_HTTP_URL (got {url!r})")
        body = action.get("body")
        if body is None:
            body = {
                "run_id": cue.run_id,
                "cue_id": cue.cue_id,
                "attempt": cue.attempt,
                "action": action,
                "context": cue.context,
            }
        method = str(action.get("method", "POST")).upper()
        headers = {str(k): str(v) for k, v in (action.get("headers") or {}).items()}
        if not any(name.lower() == "idempotency-key" for name in headers):
            headers["Idempotency-Key"] = idempotency_key(cue)
        timeout_s = float(action.get("timeout_s") or conf.timeout_s)

        limit_bytes = self.settings.max_message_bytes

        async def send() -> httpx.Response:
            assert self.client is not None
            request = self.client.build_request(
                method, url, json=body, headers=headers, timeout=timeout_s
            )
            try:
                async with asyncio.timeout(timeout_s):  # the whole exchange, not each read
                    sent = await self.client.send(request, stream=True)
                    try:
                        response = await _whole(sent, limit_bytes)
                    finally:
                        await sent.aclose()
            except TimeoutError:
                raise AnswerFailed(f"no whole answer within {timeout_s:g} s from {url}") from None
            if response.status_code >= 500:
                raise ServerError(response)
            return response

        retrying = AsyncRetrying(
            stop=stop_after_attempt(max(1, conf.tries)),
            wait=wait_exponential(multiplier=conf.backoff_s, max=5.0),
            retry=retry_if_exception(_transient),
            reraise=True,
        )
        response: httpx.Response = await retrying(send)
        answer = _answer(response)
        cue.put_context(f"{cue.cue_id}.response", answer, tags=["http"])
        if response.status_code >= 300:  # a redirect is not followed: the work was not done
            raise RuntimeError(f"HTTP {response.status_code} from {url}: {response.text[-500:]}")
        return Result(result={"status_code": response.status_code, "response": answer})
