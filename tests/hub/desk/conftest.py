"""The desk's browser tests: Debian's chromium driven by Playwright, a real hub, real echo
specialists. Chromium is a system package (.ci/run installs it when missing): a missing
browser fails these tests, it never skips them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

CHROMIUM = os.environ.get("CALLBOARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
VIEWPORT = {"width": 1280, "height": 800}
WAIT_MS = 20_000  # deadlines, not sleeps: generous, as the machine is shared and loaded
expect.set_options(timeout=WAIT_MS)


def launch(playwright: Any) -> Browser:
    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y chromium`; "
        ".ci/run does it), never `playwright install`"
    )
    browser: Browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    return browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Per module, not per session: while Playwright's sync API is open its event loop runs
    # in this thread, and the suite's asyncio tests after these could not start their own.
    with sync_playwright() as playwright:
        found = launch(playwright)
        yield found
        found.close()


class Watched:
    """A page whose script errors fail the test (a broken script would pass a test that
    only looked at server-rendered HTML)."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.page: Page = context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        # what the Content Security Policy refused (hub.desk.headers): the desk's own page
        # must need nothing it forbids
        self.page.on("console", self._refused)
        self.page.on("dialog", lambda dialog: dialog.accept())  # confirm() on cancel

    def _refused(self, message: Any) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            self.errors.append(message.text)


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.set_default_timeout(WAIT_MS)
    found = Watched(context)
    yield found
    context.close()
    assert found.errors == [], f"script errors on the page: {found.errors}"


@pytest.fixture
def page(watched: Watched) -> Page:
    return watched.page
