"""The desk with CALLBOARD_API_KEY set: a login form, an HttpOnly SameSite=Strict cookie that
never holds the key, the CSRF header on cookie-authenticated writes, and a browser that
logs in once and then acts and follows a run live through the cookie."""

from __future__ import annotations

import re
from collections.abc import Iterator
from http.cookies import SimpleCookie

import httpx
import pytest
from playwright.sync_api import Page, expect

from callboard.embedded import EmbeddedServer
from hub.desk import session
from hub.desk.login import local_path
from tests.e2e.procs import child_env, processes, wait_done, wait_online
from tests.hub.desk.conftest import Watched

pytestmark = pytest.mark.redis
KEY = "desk-key-0123456789-secret"
AGENT = "specialist-build"
MANUAL = """
cuelist: desk-auth
cues:
  - {id: GATE-100, target_agents: [specialist-build], manual: true, action: {execute_ms: 300}}
"""


@pytest.fixture(scope="module")
def hub_url(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    env = child_env(redis_server, CALLBOARD_API_KEY=KEY)
    with processes(env, tmp_path_factory.mktemp("desk-auth")) as procs:
        url = procs.hub()
        procs.echo(AGENT)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as api:
            wait_online(api, [AGENT])
            r = api.post("/v1/cuelists", content=MANUAL, headers={"Content-Type": "text/yaml"})
            assert r.status_code == 201, r.text
        yield url


@pytest.fixture
def bearer(hub_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hub_url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


def login(hub_url: str) -> httpx.Client:
    """A client holding only the desk's cookie (no Authorization header)."""
    client = httpx.Client(base_url=hub_url)
    r = client.post("/login", data={"key": KEY, "next": "/"})
    assert r.status_code == 303, r.text
    return client


def test_pages_send_a_stranger_to_the_login_form(hub_url: str) -> None:
    for path in ["/", "/cuelists", "/agents?x=1"]:
        r = httpx.get(f"{hub_url}{path}")
        assert r.status_code == 303
        assert r.headers["location"].startswith("/login?next=")
    assert httpx.get(f"{hub_url}/board/parts").status_code == 401
    login_page = httpx.get(f"{hub_url}/login?next=/agents")
    assert login_page.status_code == 200
    assert 'type="password"' in login_page.text


def test_a_wrong_key_is_refused_and_sets_no_cookie(hub_url: str) -> None:
    r = httpx.post(f"{hub_url}/login", data={"key": "not-it"})
    assert r.status_code == 401
    assert "not this hub&#39;s API key" in r.text
    assert "set-cookie" not in r.headers


def test_the_cookie_is_httponly_strict_and_not_the_key(hub_url: str) -> None:
    r = httpx.post(f"{hub_url}/login", data={"key": KEY, "next": "/agents"})
    assert r.status_code == 303 and r.headers["location"] == "/agents"
    header = r.headers["set-cookie"]
    assert "HttpOnly" in header and "SameSite=strict" in header.replace("Strict", "strict")
    morsel = SimpleCookie(header)[session.COOKIE]
    assert KEY not in morsel.value
    assert session.valid(KEY, morsel.value)


def test_cookie_writes_need_the_desk_header(hub_url: str, bearer: httpx.Client) -> None:
    """A cross-site form could send the cookie, never a custom header: without it, 403."""
    client = login(hub_url)
    try:
        assert client.get("/v1/runs").status_code == 200  # reads need no header
        refused = client.post("/v1/runs", json={"cuelist": "desk-auth"})
        assert refused.status_code == 403
        assert session.CSRF_HEADER in refused.json()["detail"]
        runs = bearer.get("/v1/runs", params={"cuelist": "desk-auth"}).json()["data"]
        assert [r for r in runs if not r["dry"]] == []  # nothing was started
        ok = client.post(
            "/v1/runs",
            json={"cuelist": "desk-auth", "dry": True},
            headers={session.CSRF_HEADER: "1"},
        )
        assert ok.status_code == 201, ok.text
        assert wait_done(bearer, ok.json()["run_id"])["status"] == "dry"
    finally:
        client.close()


def test_a_cross_site_write_is_refused_even_with_the_key(bearer: httpx.Client) -> None:
    r = bearer.post(
        "/v1/runs", json={"cuelist": "desk-auth"}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert r.status_code == 403
    assert "cross-site" in r.json()["detail"]


def test_a_forged_or_stale_cookie_is_not_a_session(hub_url: str) -> None:
    for value in ["", "x", "1.abc", session.issue("another-key"), session.issue(KEY, now=1000)]:
        r = httpx.get(f"{hub_url}/v1/runs", cookies={session.COOKIE: value})
        assert r.status_code == 401, value
    assert httpx.get(f"{hub_url}/v1/runs", cookies={session.COOKIE: session.issue(KEY)}).is_success


def test_session_values() -> None:
    now = 1_800_000_000
    value = session.issue(KEY, now=now)
    assert session.valid(KEY, value, now=now + 60)
    assert not session.valid(KEY, value, now=now + session.SESSION_S + 3600)  # expired
    assert not session.valid(KEY, value, now=now - 3600)  # from the future
    issued, mac = value.split(".")
    assert not session.valid(KEY, f"{int(issued) + 1}.{mac}", now=now)  # tampered
    assert not session.valid("other", value, now=now)


@pytest.mark.parametrize(
    ("target", "expected"),
    [("/runs/x?y=1", "/runs/x?y=1"), ("//evil.example", "/"), ("https://evil.example", "/"),
     ("/\\evil", "/"), (None, "/"), ("", "/")],
)  # fmt: skip
def test_login_only_returns_to_this_hub(target: str | None, expected: str) -> None:
    assert local_path(target) == expected


def test_log_in_once_then_act_and_follow_a_run_live(
    hub_url: str, bearer: httpx.Client, watched: Watched
) -> None:
    page: Page = watched.page
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.goto(f"{hub_url}/cuelists/desk-auth")
    expect(page).to_have_url(re.compile(r"/login\?next=/cuelists/desk-auth$"))
    page.get_by_label("API key").fill("wrong")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("not this hub's API key")
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{hub_url}/cuelists/desk-auth")
    cookie = next(c for c in watched.context.cookies() if c["name"] == session.COOKIE)
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # the page's script cannot read it
    # an action through fetch (cookie + the desk header), then the run page follows the
    # run through an EventSource that carries only the cookie
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]+$"))
    run_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("[data-live-note]")).to_have_text("live")
    page.locator("[data-part=needs] button", has_text="GO").click()
    expect(page.locator('.node[data-node="GATE-100"] [data-label]')).to_have_text("completed")
    expect(page.locator("#run-status")).to_have_text("success")
    assert wait_done(bearer, run_id)["status"] == "success"
    assert any(re.search(f"/v1/runs/{run_id}/events\\?after=\\d+-\\d+$", u) for u in urls)
    assert not [u for u in urls if KEY in u]  # the key is never in a URL
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto(f"{hub_url}/")
    expect(page).to_have_url(re.compile(r"/login\?next=/$"))
