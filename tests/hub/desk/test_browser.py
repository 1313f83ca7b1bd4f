"""The calling desk in a real browser: a real hub and echo specialists, and Chromium doing
what an operator does. Each test asserts what the page shows AND the API state after."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
import yaml
from playwright.sync_api import Page, Route, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from tests.e2e.procs import ROOT, child_env, processes, wait_done, wait_online
from tests.helpers import eventually_sync
from tests.hub.desk.conftest import Watched

pytestmark = pytest.mark.redis
AGENTS = ["specialist-build", "specialist-test", "specialist-code", "specialist-deploy"]
EXAMPLE = "release-dag"
# Test cuelists, each staging one thing an operator answers.
APPROVAL = """
cuelist: desk-approval
cues:
  - {id: PREP-100, target_agents: [specialist-build], action: {execute_ms: 50}}
  - id: SHIP-200
    target_agents: [specialist-deploy]
    depends_on: [PREP-100]
    conditions: [approval_received]
    action: {execute_ms: 50}
"""
# Both builds want the runner; each takes 4 s to get ready after WARNING, so the one that
# claimed it first is still in STANDBY (not yet GO'd) while the operator picks a winner.
ARBITRATION = """
cuelist: desk-arbitration
conflict_strategy: arbitration
arbitration_timeout_s: 300
cues:
  - {id: START-100, target_agents: [specialist-code], action: {execute_ms: 20}}
  - id: HOTFIX-200
    target_agents: [specialist-build]
    depends_on: [START-100]
    resources: [runner]
    priority: 10
    action: {prepare_ms: 4000, execute_ms: 50}
  - id: NIGHTLY-210
    target_agents: [specialist-test]
    depends_on: [START-100]
    resources: [runner]
    priority: 1
    action: {prepare_ms: 4000, execute_ms: 50}
"""
SLOW = """
cuelist: desk-slow
cues:
  - {id: LONG-100, target_agents: [specialist-build], action: {execute_ms: 120000}}
  - {id: AFTER-200, target_agents: [specialist-test], depends_on: [LONG-100]}
"""
MANUAL = """
cuelist: desk-manual
cues:
  - {id: GATE-100, target_agents: [specialist-build], manual: true, action: {execute_ms: 20}}
"""
FLAKY = """
cuelist: desk-flaky
cues:
  - {id: BUILD-100, target_agents: [specialist-build], action: {fail: once}}
  - {id: SHIP-200, target_agents: [specialist-deploy], depends_on: [BUILD-100]}
"""
RESULTS = """
cuelist: desk-results
cues:
  - id: PACK-100
    target_agents: [specialist-build]
    action: {context: {build_id: b-7}, result: {artifact: app.tar}}
"""
# Its agent never answers: the missed ack raises an escalation.timeout for the operator.
GHOST = """
cuelist: desk-ghost
cues:
  - {id: CALL-100, target_agents: [specialist-ghost], ack_timeout_s: 1}
"""


BUDGET = """
cuelist: desk-budget
budget: {tokens: 100}
cues:
  - {id: ONE, target_agents: [specialist-build], action: {usage: {tokens: 80}}, auto_follow: TWO}
  - {id: TWO, target_agents: [specialist-test], action: {usage: {tokens: 80}}, auto_follow: THREE}
  - {id: THREE, target_agents: [specialist-deploy], action: {usage: {tokens: 80}}}
"""

# What an agent says, written to run script if a page ever took it as markup: context keys
# and values, a result, a not-ready reason (the cue's reason and an escalation).
PWN = "<img src=x onerror=window.__pwned=1>"
HOSTILE = f"""
cuelist: desk-hostile
cues:
  - id: SAY-100
    target_agents: [specialist-build]
    action:
      context: {{"{PWN}": "</td><script>window.__pwned=2</script>"}}
      result: {{"<svg onload=window.__pwned=3>": "{PWN}"}}
    auto_follow: BALK-200
  - id: BALK-200
    target_agents: [specialist-test]
    standby_timeout_s: 1
    action: {{ready: false, ready_reason: "{PWN}"}}
"""


class Stage:
    def __init__(self, url: str, api: httpx.Client, redis_url: str, prefix: str) -> None:
        self.url = url
        self.api = api
        self.redis_url = redis_url
        self.keys = Keys(prefix)

    def start(self, cuelist: str) -> str:
        r = self.api.post("/v1/runs", json={"cuelist": cuelist})
        assert r.status_code == 201, r.text
        run_id: str = r.json()["run_id"]
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get(f"/v1/runs/{run_id}").json()
        return found

    def cue_state(self, run_id: str, cue: str) -> str:
        return str(self.run(run_id)["cues"][cue]["state"])


@pytest.fixture(scope="module")
def stage(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    env = child_env(redis_server)
    with processes(env, tmp_path_factory.mktemp("desk")) as procs:
        url = procs.hub()
        for agent in AGENTS:
            procs.echo(agent)
        with httpx.Client(base_url=url, timeout=30) as api:
            wait_online(api, AGENTS)
            sources = [(ROOT / "cuelists" / f"{EXAMPLE}.yaml").read_text()]
            extra = [APPROVAL, ARBITRATION, SLOW, MANUAL, FLAKY, GHOST, RESULTS, BUDGET, HOSTILE]
            for text in [*sources, *extra]:
                r = api.post(
                    "/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"}
                )
                assert r.status_code == 201, r.text
            yield Stage(url, api, redis_server.url, env["CALLBOARD_PREFIX"])


def node_label(page: Page, cue: str) -> Any:
    return page.locator(f'.node[data-node="{cue}"] [data-label]')


def row_state(page: Page, cue: str) -> Any:
    return page.locator(f'tr[data-cue="{cue}"] [data-col="state"]')


WATCH_NODES = """() => {
  window.__seen = [];
  window.__noReload = true;
  new MutationObserver((changes) => {
    for (const c of changes) {
      const node = c.target.parentElement && c.target.parentElement.closest('.node');
      const label = node && node.querySelector('[data-label]').textContent;
      if (node) window.__seen.push([node.dataset.node, label]);
    }
  }).observe(document.querySelector('svg.dag-svg'),
             {subtree: true, characterData: true, childList: true});
}"""


def test_start_an_example_run_and_watch_it_live(stage: Stage, page: Page) -> None:
    """From the cuelist page: Start run, then GO the armed approval cue from the keyboard;
    the graph and the timeline follow the run's events with no reload."""
    page.goto(f"{stage.url}/cuelists/{EXAMPLE}")
    expect(page.locator(".node")).to_have_count(6)
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]+$"))
    run_id = page.url.rsplit("/", 1)[1]
    page.evaluate(WATCH_NODES)
    expect(node_label(page, "APPROVE-350")).to_have_text("armed")
    expect(node_label(page, "TEST-300")).to_have_text("completed")
    expect(node_label(page, "DEPLOY-400")).to_have_text("waiting")
    go = page.locator("[data-part=needs] button", has_text="GO")
    go.focus()  # a real button: reachable and pressed from the keyboard
    expect(page.locator("[data-part=needs] .does")).to_have_text(
        "Give GO to APPROVE-350: the hub calls WARNING, STANDBY and GO on its targets"
    )  # what it will do, shown on focus
    page.keyboard.press("Enter")
    expect(page.locator("#flash")).to_contain_text("done (200")
    expect(node_label(page, "DEPLOY-400")).to_have_text("completed")
    expect(row_state(page, "DEPLOY-400")).to_have_text("completed")
    expect(page.locator("#run-status")).to_have_text("success")
    expect(page.locator("[data-live-note]")).to_have_text("finished: success")
    assert page.evaluate("window.__noReload") is True
    seen = page.evaluate("window.__seen")
    deploy = [label for cue, label in seen if cue == "DEPLOY-400"]
    assert len(set(deploy)) >= 2 and deploy[-1] == "completed", seen  # it moved, live
    run = stage.run(run_id)
    assert run["status"] == "success"
    assert run["cues"]["APPROVE-350"]["fired_by"] == "operator"
    go_time = page.locator('tr[data-cue="DEPLOY-400"] td').nth(6)
    assert go_time.inner_text().strip() != ""  # the GO time is in the timeline


def test_approve_a_condition_from_the_board(stage: Stage, page: Page) -> None:
    run_id = stage.start("desk-approval")
    eventually_sync(lambda: stage.cue_state(run_id, "PREP-100") == "completed", 20)
    page.goto(stage.url)
    item = page.locator(f'[data-item="condition:{run_id}:approval_received"]')
    expect(item).to_contain_text("SHIP-200")
    item.get_by_role("button", name="Raise approval_received").click()
    expect(page.locator("#flash")).to_contain_text("done (200")
    expect(item).to_have_count(0)  # the inbox refreshed: nothing left to approve
    run = wait_done(stage.api, run_id)
    assert "approval_received" in run["conditions"]
    assert run["status"] == "success"


def test_raise_a_spent_budget_from_the_run_page(stage: Stage, page: Page) -> None:
    run_id = stage.start("desk-budget")
    eventually_sync(lambda: stage.run(run_id)["status"] == "holding", 20)
    page.goto(f"{stage.url}/runs/{run_id}")
    expect(page.locator(".runline .why")).to_contain_text("budget tokens spent 160 / 100")
    page.locator("#budget-tokens").fill("1000")
    page.locator("form.budget-form").get_by_role("button", name="Raise").click()
    expect(page.locator("#flash")).to_contain_text("done (200")
    run = wait_done(stage.api, run_id)
    assert run["status"] == "success" and run["budget"]["tokens"] == 1000
    assert run["usage"]["tokens"] == 240


def test_a_live_update_keeps_what_the_operator_has_typed(stage: Stage, page: Page) -> None:
    """A live update redraws the part that holds the budget form between typing and Raise:
    the typed value is still there, and Raise sends it."""
    run_id = stage.start("desk-budget")
    eventually_sync(lambda: stage.run(run_id)["status"] == "holding", 20)
    page.goto(f"{stage.url}/runs/{run_id}")
    field = page.locator("#budget-tokens")
    field.fill("1000")
    field.evaluate("el => { el.dataset.drawn = 'before'; }")  # gone once redrawn
    page.evaluate("refreshSoon(0)")  # what an event of the run does: its parts are redrawn
    expect(page.locator("#budget-tokens[data-drawn]")).to_have_count(0)
    expect(field).to_have_value("1000")
    page.locator("form.budget-form").get_by_role("button", name="Raise").click()
    expect(page.locator("#flash")).to_contain_text("done (200")
    run = wait_done(stage.api, run_id)
    assert run["status"] == "success" and run["budget"]["tokens"] == 1000


@pytest.mark.parametrize("pick", ["holder", "waiter"])
def test_resolve_an_arbitration(stage: Stage, page: Page, pick: str) -> None:
    run_id = stage.start("desk-arbitration")

    def conflict() -> dict[str, Any] | None:
        escs = stage.api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
        return next((e for e in escs if e["type"] == "escalation.conflict"), None)

    esc = eventually_sync(conflict, 20, message="the conflict escalation")
    # the holder is still in STANDBY (4 s to get ready): picking it keeps it going; picking
    # the waiting cue stands the holder down and re-queues it behind the winner
    cues = stage.run(run_id)["cues"]
    wanted = "standby" if pick == "holder" else "warning"
    rivals = esc["payload"]["cues_involved"]
    (winner,) = [c for c in rivals if cues[c.split("/")[1]]["state"] == wanted]
    page.goto(f"{stage.url}/runs/{run_id}")
    needs = page.locator("[data-part=needs]")
    expect(needs.get_by_role("button", name="Pick ")).to_have_count(2)  # one per rival
    needs.get_by_role("button", name=f"Pick {winner.split('/')[1]}").click()
    expect(page.locator("#flash")).to_contain_text(f"winner {winner}")
    expect(page.locator("[data-part=needs] button", has_text="Pick")).to_have_count(0)
    resolved = stage.api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
    mine = next(e for e in resolved if e["id"] == esc["id"])
    assert mine["status"] == "resolved"
    assert mine["resolution"]["winner"] == winner
    assert wait_done(stage.api, run_id, 60)["status"] == "success"
    expect(page.locator("#run-status")).to_have_text("success")


def test_retry_a_failed_cue_of_a_failed_run(stage: Stage, watched: Watched) -> None:
    """The run failed (BUILD-100 fails its first attempt); Retry on its row runs it again,
    and the page follows the run live again to its success."""
    page = watched.page
    run_id = stage.start("desk-flaky")
    assert wait_done(stage.api, run_id)["status"] == "failed"
    page.goto(f"{stage.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("failed")
    row = page.locator('tr[data-cue="BUILD-100"]')
    row.get_by_role("button", name="Retry").click()
    expect(page.locator("#flash")).to_contain_text("done (200")
    expect(page.locator("#run-status")).to_have_text("success")
    expect(node_label(page, "SHIP-200")).to_have_text("completed")  # followed live again
    assert watched.errors == []
    run = stage.run(run_id)
    assert run["status"] == "success"
    assert run["cues"]["BUILD-100"]["attempt"] == 2
    assert run["cues"]["BUILD-100"]["fired_by"] == "operator"


def test_an_action_answered_503_is_sent_again_with_its_key(stage: Stage, page: Page) -> None:
    """The hub's first answer to the budget's raise is a 503 (no leader in time): the desk
    sends the same request again, with the same Idempotency-Key, and it is done."""
    run_id = stage.start("desk-budget")
    eventually_sync(lambda: stage.run(run_id)["status"] == "holding", 20)
    sent: list[str | None] = []

    def first_unavailable(route: Route) -> None:
        sent.append(route.request.headers.get("idempotency-key"))
        if len(sent) == 1:
            body = '{"detail": "no leading hub answered ChangeBudget within 10s"}'
            route.fulfill(status=503, body=body, headers={"Retry-After": "0"},
                          content_type="application/json")  # fmt: skip
        else:
            route.continue_()

    page.route(re.compile(r"/v1/runs/[^/]+/budget$"), first_unavailable)
    page.goto(f"{stage.url}/runs/{run_id}")
    page.locator("#budget-tokens").fill("1000")
    page.locator("form.budget-form").get_by_role("button", name="Raise").click()
    expect(page.locator("#flash")).to_contain_text("done (200")
    assert len(sent) == 2 and sent[0] and sent[0] == sent[1]
    assert wait_done(stage.api, run_id)["budget"]["tokens"] == 1000


def test_cancel_a_run(stage: Stage, page: Page) -> None:
    run_id = stage.start("desk-slow")
    page.goto(f"{stage.url}/runs/{run_id}")
    expect(node_label(page, "LONG-100")).to_have_text("go")  # live: it was fired after load
    page.get_by_role("button", name="Cancel run").click()  # confirm() is accepted
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(node_label(page, "LONG-100")).to_have_text("cancelled")
    expect(row_state(page, "AFTER-200")).to_have_text("cancelled")
    run = stage.run(run_id)
    assert run["status"] == "cancelled"
    assert run["cues"]["LONG-100"]["state"] == "cancelled"


# Every label a node of the graph shows, in order, from the moment the page is parsed.
RECORD_NODES = """document.addEventListener('DOMContentLoaded', () => {
  window.__labels = [];
  const nodeOf = (target) => (target.closest ? target : target.parentElement).closest('.node');
  new MutationObserver((changes) => {
    for (const c of changes) {
      const node = nodeOf(c.target);
      if (!node) continue;
      window.__labels.push([node.dataset.node, node.querySelector('[data-label]').textContent]);
    }
  }).observe(document.querySelector('svg.dag-svg'),
             {subtree: true, characterData: true, childList: true});
});"""


def test_a_page_drawn_before_the_run_moved_on_catches_up(stage: Stage, page: Page) -> None:
    """The page's state was read, then the run moved on before the page followed its events
    (as when a GO is written between the read and the page's drawing, stamped before it):
    the page follows the events after the newest one its state holds, so it shows every
    move after it, and none before it again."""
    run_id = stage.start("desk-manual")
    eventually_sync(lambda: stage.cue_state(run_id, "GATE-100") == "armed", 20)
    drawn = page.request.get(f"{stage.url}/runs/{run_id}")
    assert drawn.ok and re.search(r'data-after="\d+-\d+"', drawn.text())
    assert stage.api.post(f"/v1/runs/{run_id}/cues/GATE-100/go").status_code == 200
    assert wait_done(stage.api, run_id)["status"] == "success"
    page.route(
        f"{stage.url}/runs/{run_id}",
        lambda route: route.fulfill(status=200, content_type="text/html", body=drawn.text()),
    )
    page.add_init_script(RECORD_NODES)
    page.goto(f"{stage.url}/runs/{run_id}")
    expect(node_label(page, "GATE-100")).to_have_text("completed")
    expect(page.locator("#run-status")).to_have_text("success")
    labels = [label for node, label in page.evaluate("window.__labels") if node == "GATE-100"]
    assert "go" in labels and "armed" not in labels, labels  # news once; the past not again


def test_a_late_answer_does_not_undo_a_newer_one(stage: Stage, page: Page) -> None:
    """A refresh asked before the cancel and answered after it: the page still ends up
    showing the cancel, because it asks again once that answer is in."""
    run_id = stage.start("desk-slow")
    page.goto(f"{stage.url}/runs/{run_id}")
    expect(node_label(page, "LONG-100")).to_have_text("go")
    before = page.request.get(f"{stage.url}/runs/{run_id}/parts?cues=*")
    assert before.ok and "go" in before.text()
    held: list[Route] = []

    def hold_the_first(route: Route) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(re.compile(r"/runs/[^/]+/parts\?"), hold_the_first)
    # the page asks for a refresh before the cancel is sent (as any event of the run makes
    # it do), and that answer is held: it can only be the state from before the cancel
    page.evaluate("() => { refreshSoon(0); }")
    deadline = time.monotonic() + 10
    while not held and time.monotonic() < deadline:  # the sync API runs the route handler
        page.wait_for_timeout(20)  # only inside a call: this one lets it
    assert held, "the page asked for no refresh"
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("[data-live-note]")).to_have_text("finished: cancelled")
    expect(node_label(page, "LONG-100")).to_have_text("cancelled")  # straight from the event
    # a page that asks again meanwhile gets that answer before the held one; this page
    # waits for the held answer before it asks again
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_event("requestfinished", lambda r: "/parts?" in r.url, timeout=1500)
    held[0].fulfill(status=200, content_type="application/json", body=before.body())
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(node_label(page, "LONG-100")).to_have_text("cancelled")
    expect(row_state(page, "AFTER-200")).to_have_text("cancelled")


def test_a_refused_action_shows_the_reason(stage: Stage, watched: Watched) -> None:
    """A page left open while someone else acts: its GO is refused and says why (409)."""
    page = watched.page
    run_id = stage.start("desk-manual")
    eventually_sync(lambda: stage.cue_state(run_id, "GATE-100") == "armed", 20)
    page.route(re.compile(r"/(events|parts)(\?|$)"), lambda route: route.abort())
    page.goto(f"{stage.url}/runs/{run_id}")
    go = page.locator("[data-part=needs] button", has_text="GO")
    expect(go).to_be_visible()
    assert stage.api.post(f"/v1/runs/{run_id}/cues/GATE-100/go").status_code == 200
    wait_done(stage.api, run_id)
    go.click()
    outcome = page.locator("[data-part=needs] li output.outcome")
    expect(outcome).to_contain_text("refused (409: run")
    expect(outcome).to_contain_text("already success")
    assert stage.run(run_id)["cues"]["GATE-100"]["attempt"] == 1  # nothing was done twice
    watched.errors = [e for e in watched.errors if "net::" not in e]  # the blocked stream


def test_open_a_dead_letter(stage: Stage, page: Page) -> None:
    run_id = stage.start("desk-manual")
    body = json.dumps({
        "message_type": "status.exploded", "run_id": run_id, "cue_id": "GATE-100", "payload": {},
    })  # fmt: skip
    client = redis.Redis.from_url(stage.redis_url)
    try:
        client.xadd(stage.keys.out("specialist-build"), {"m": body})
    finally:
        client.close()

    def letter() -> dict[str, Any] | None:
        data = stage.api.get("/v1/deadletters").json()["data"]
        return next((d for d in data if d["raw_text"] == body), None)

    found = eventually_sync(letter, 20, message="the garbage dead-lettered")
    page.goto(f"{stage.url}/deadletters")
    entry = page.locator(f'details[data-letter="{found["id"]}"]')
    expect(entry.locator("pre.raw")).to_be_hidden()
    entry.locator("summary").click()
    expect(entry.locator("pre.raw")).to_have_text(body)
    expect(entry).to_contain_text(found["reason"])
    entry.get_by_role("link", name="GATE-100").click()
    page.wait_for_url(f"**/runs/{run_id}#cue-GATE-100")
    expect(page.locator("tr:target")).to_have_attribute("data-cue", "GATE-100")
    stage.api.post(f"/v1/runs/{run_id}/cancel")


def test_what_agents_say_is_shown_as_text_and_never_run(stage: Stage, watched: Watched) -> None:
    """Markup in everything an agent controls (context, result, a not-ready reason and the
    escalation it raises, a dead letter's raw text) is shown as text on every page, and
    runs nothing. The pages carry a Content Security Policy and refuse to be framed
    (hub.desk.headers), so even a string rendered as markup would run no script."""
    run_id = stage.start("desk-hostile")
    eventually_sync(
        lambda: stage.api.get("/v1/escalations", params={"run_id": run_id}).json()["data"],
        20, message="the not-ready reason escalated",
    )  # fmt: skip
    garbage = f'{{"message_type": "{PWN}", "run_id": "{run_id}"}}'
    client = redis.Redis.from_url(stage.redis_url)
    try:
        client.xadd(stage.keys.out("specialist-build"), {"m": garbage})
    finally:
        client.close()
    eventually_sync(
        lambda: any(d["raw_text"] == garbage
                    for d in stage.api.get("/v1/deadletters").json()["data"]),
        20, message="the garbage dead-lettered",
    )  # fmt: skip
    page = watched.page
    for path in (f"/runs/{run_id}", "/escalations", "/deadletters", "/"):
        response = page.goto(f"{stage.url}{path}")
        assert response is not None
        headers = response.headers
        assert "script-src 'self'" in headers["content-security-policy"], path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
        assert headers["x-frame-options"] == "DENY", path
        for letter in page.locator("details[data-letter] summary").all():
            letter.click()  # open each dead letter's raw text
        if path != "/":
            expect(page.locator("main")).to_contain_text(PWN)  # there, as text
        assert page.evaluate("window.__pwned") is None, path
    stage.api.post(f"/v1/runs/{run_id}/cancel")


def test_a_dry_run_is_one_click_from_the_cuelist(stage: Stage, page: Page) -> None:
    page.goto(f"{stage.url}/cuelists/{EXAMPLE}")
    page.get_by_role("button", name="Dry run").click()
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]+$"))
    run_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#run-status")).to_have_text("dry")
    expect(row_state(page, "DEPLOY-400")).to_have_text("completed")  # walked, stand-ins
    run = stage.run(run_id)
    assert run["status"] == "dry" and run["dry"] is True
    assert run["cuelist"] == EXAMPLE


def test_a_run_page_shows_results_and_the_shared_context(stage: Stage, page: Page) -> None:
    run_id = stage.start("desk-results")
    wait_done(stage.api, run_id)
    page.goto(f"{stage.url}/runs/{run_id}")
    expect(page.locator('tr[data-cue="PACK-100"]')).to_contain_text('"artifact": "app.tar"')
    entry = page.locator("[data-part=context] tr", has=page.locator("th", has_text="build_id"))
    expect(entry).to_contain_text("b-7")
    expect(entry.locator("td").nth(1)).to_have_text("specialist-build")  # the source
    expect(entry.locator("time")).to_have_count(1)  # when it was written
    api = stage.api.get(f"/v1/runs/{run_id}/context").json()["entries"]["build_id"]
    assert api["value"] == "b-7" and api["source"] == "specialist-build"


def test_filter_the_board_by_status_and_cuelist(stage: Stage, page: Page) -> None:
    run_id = stage.start("desk-manual")  # holds at its manual cue
    eventually_sync(lambda: stage.run(run_id)["status"] == "holding", 20)
    page.goto(stage.url)
    filters = page.locator("form.filters")
    filters.get_by_label("Status").select_option("holding")
    filters.get_by_label("Cuelist").select_option("desk-manual")
    filters.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"status=holding&cuelist=desk-manual"))
    rows = page.locator("[data-part=runs] tr[data-run]")
    expect(rows.filter(has=page.locator(f'a[href="/runs/{run_id}"]'))).to_have_count(1)
    listed = rows.evaluate_all("(rs) => rs.map((r) => r.dataset.run)")
    query = {"status": "holding", "cuelist": "desk-manual"}
    shown = {r["run_id"] for r in stage.api.get("/v1/runs", params=query).json()["data"]}
    assert set(listed) == shown and run_id in shown
    page.goto(f"{stage.url}/?status=success&cuelist=desk-manual")
    expect(page.locator(f'[data-part=runs] tr[data-run="{run_id}"]')).to_have_count(0)
    stage.api.post(f"/v1/runs/{run_id}/cancel")


def test_resolve_an_escalation_from_its_page(stage: Stage, page: Page) -> None:
    run_id = stage.start("desk-ghost")

    def raised() -> dict[str, Any] | None:
        escs = stage.api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
        return next((e for e in escs if e["type"] == "escalation.timeout"), None)

    esc = eventually_sync(raised, 20, message="the timeout escalation")
    page.goto(f"{stage.url}/escalations")
    row = page.locator(f'tr[data-escalation="{esc["id"]}"]')
    expect(row).to_contain_text("no ack.warning from specialist-ghost")
    expect(row.get_by_role("link", name="CALL-100")).to_have_attribute(
        "href", f"/runs/{run_id}#cue-CALL-100"
    )
    row.get_by_role("button", name="Resolve").click()
    expect(page.locator("#flash")).to_contain_text("done (200")
    escs = stage.api.get("/v1/escalations", params={"run_id": run_id}).json()["data"]
    assert next(e for e in escs if e["id"] == esc["id"])["status"] == "resolved"


@pytest.mark.parametrize(
    "path",
    ["/", "/cuelists", "/cuelists/release-dag", "/runs/{run}", "/agents", "/escalations",
     "/deadletters"],
)  # fmt: skip
def test_phone_width_has_no_page_overflow(stage: Stage, watched: Watched, path: str) -> None:
    """At 390 px wide, wide tables and the graph scroll inside their boxes, not the page."""
    run_id = stage.start(EXAMPLE) if "{run}" in path else None  # six cues; it holds
    path = path.format(run=run_id)
    page = watched.context.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{stage.url}{path}")
    expect(page.locator("h1")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    if run_id:
        stage.api.post(f"/v1/runs/{run_id}/cancel")


def test_docs_work_offline(stage: Stage, page: Page) -> None:
    """Swagger UI comes from the hub itself: any request to another host is refused and
    recorded, and the docs still render the API."""
    elsewhere: list[str] = []

    def guard(route: Any) -> None:
        if route.request.url.startswith(stage.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    page.goto(f"{stage.url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("callboard hub")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    assert elsewhere == []
    html = stage.api.get("/docs").text
    hosts = set(re.findall(r"""(?:src|href)=["']?(https?://[^/"']+)""", html))
    assert hosts == set(), hosts


def test_desk_pages_link_no_other_host(stage: Stage) -> None:
    for path in ["/", "/cuelists", f"/cuelists/{EXAMPLE}", "/agents", "/escalations"]:
        html = stage.api.get(path).text
        assert re.findall(r"""(?:src|href)=["']?https?://""", html) == [], path


def test_yaml_is_shown_as_submitted(stage: Stage, page: Page) -> None:
    page.goto(f"{stage.url}/cuelists/{EXAMPLE}")
    source = (ROOT / "cuelists" / f"{EXAMPLE}.yaml").read_text()
    expect(page.locator("pre.source")).to_have_text(source.strip("\n") + "\n")
    doc = yaml.safe_load(source)
    assert {c["id"] for c in doc["cues"]} == set(
        page.locator(".node").evaluate_all("(ns) => ns.map((n) => n.dataset.node)")
    )


def test_a_cuelist_page_shows_its_validation_warnings(stage: Stage, page: Page) -> None:
    text = (ROOT / "cuelists" / "shared-runner.yaml").read_text()
    r = stage.api.post("/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"})
    assert r.status_code in (200, 201), r.text
    (warning,) = r.json()["warnings"]
    page.goto(f"{stage.url}/cuelists/shared-runner")
    shown = page.locator("li.why", has_text=warning["message"])
    expect(shown).to_have_count(1)
    expect(shown).to_contain_text(f"{warning['cue']} {warning['key']} (line {warning['line']})")


def test_agents_page_shows_the_registry_and_the_wiring_map(stage: Stage, page: Page) -> None:
    page.goto(f"{stage.url}/agents")
    registry = stage.api.get("/v1/agents").json()["data"]
    for agent in AGENTS:
        row = page.locator(f'tr[data-agent="{agent}"]')
        online = next(a for a in registry if a["agent"] == agent)["online"]
        expect(row.locator("td").nth(1)).to_have_text("online" if online else "offline")
        expect(page.locator("svg.wiring text.mono", has_text=agent)).to_have_count(1)
    expect(page.locator("svg.wiring .hubnode")).to_have_count(1)
    wired = stage.api.get("/v1/wiring").json()
    expect(page.locator("svg.wiring path.edge")).to_have_count(
        len(wired["agents"])
        + len({(e["from"], e["to"]) for e in wired["edges"] if e["kind"] == "handoff"})
    )
