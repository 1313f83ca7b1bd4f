"""The CLI's client sends every request that changes state with an Idempotency-Key of its
own, and sends it again with the same key after a 503 or a failed connection (the hub does
it once); a refusal is not sent again."""

from __future__ import annotations

import httpx
import pytest

from callboard import client as cli_client
from callboard.client import TRIES, ApiError, BadAnswer, Client, OutcomeUnknown, Unreachable


class Hub:
    """Answers each request with the next of `answers` (a status, or an exception to
    raise), recording what it was sent."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        body = {"run_id": "r1", "id": "e1", "status": "running", "state": "warning", "attempt": 1}
        if answer >= 400:
            body = {"detail": f"answered {answer}"}
        return httpx.Response(answer, json=body, headers={"Retry-After": "0"})

    def keys(self) -> list[str | None]:
        return [r.headers.get("Idempotency-Key") for r in self.sent]


def client(hub: Hub) -> Client:
    return Client("http://hub", transport=httpx.MockTransport(hub))


@pytest.fixture(autouse=True)
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_client, "WAIT_S", 0.0)


def test_a_go_answered_503_is_sent_again_with_the_same_key() -> None:
    hub = Hub(503, 200)
    assert client(hub).go("r1", "C")["state"] == "warning"
    keys = hub.keys()
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]


def test_a_lost_connection_is_sent_again_with_the_same_key() -> None:
    hub = Hub(httpx.ReadTimeout("lost"), 201)
    assert client(hub).start_run("c") == "r1"
    keys = hub.keys()
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]


def test_past_its_tries_the_503_or_the_lost_link_is_told() -> None:
    hub = Hub(*[503] * TRIES)  # "still being served": it may land yet, so it is not known
    with pytest.raises(OutcomeUnknown) as unknown:
        client(hub).cancel("r1")
    assert unknown.value.key == hub.keys()[0] and len(hub.sent) == TRIES
    gone = Hub(*[httpx.ConnectError("refused")] * TRIES)  # never sent: no hub
    with pytest.raises(Unreachable):
        client(gone).rerun("r1")
    assert len(gone.sent) == TRIES


def test_a_command_sent_but_never_answered_has_an_unknown_outcome_and_its_key() -> None:
    hub = Hub(httpx.ConnectError("refused"), *[httpx.ReadTimeout("slow")] * (TRIES - 1))
    with pytest.raises(OutcomeUnknown) as unknown:
        client(hub).go("r1", "C", key="mine")
    assert unknown.value.key == "mine" and hub.keys() == ["mine"] * TRIES


def test_an_answer_that_is_not_the_apis_is_never_a_success() -> None:
    def page(status: int, kind: str = "text/html") -> Client:
        answer = httpx.Response(status, text="<html>Sign in</html>", headers={"content-type": kind})
        return Client("http://hub", transport=httpx.MockTransport(lambda _: answer))

    for call in (
        lambda c: c.cancel("r1"), lambda c: c.runs_page(), lambda c: c.health(),
        lambda c: c.metrics(), lambda c: list(c.events("r1")),
    ):  # fmt: skip
        with pytest.raises(BadAnswer, match="not the hub's API"):
            call(page(200))
    with pytest.raises(ApiError) as refused:  # a proxy's 503 page is a refusal, not health
        page(503).health()
    assert refused.value.status == 503 and "text/html page" in refused.value.detail
    ok = httpx.Response(200, json={"detail": "hello"})  # JSON, but not the route's shape
    c = Client("http://hub", transport=httpx.MockTransport(lambda _: ok))
    with pytest.raises(BadAnswer, match="lacks run_id, status"):
        c.cancel("r1")


def test_a_refusal_is_not_sent_again_and_each_command_has_its_own_key() -> None:
    hub = Hub(409, 200, 200)
    with pytest.raises(ApiError):
        client(hub).go("r1", "C")
    c = client(hub)
    c.budget("r1", {"tokens": 10})
    c.resolve("e1", note="ok")
    keys = hub.keys()
    assert len(keys) == 3 and len(set(keys)) == 3 and all(keys)


def test_a_start_keeps_the_key_it_was_given() -> None:
    hub = Hub(503, 201)
    client(hub).start_run("c", idempotency_key="mine")
    assert hub.keys() == ["mine", "mine"]
