"""Write docs/desk-board.png and docs/desk-run.png: the calling desk at 1280x800, with the
example cuelists run by a real hub and echo specialists (see scripts/screenshots)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from callboard.embedded import EmbeddedServer  # noqa: E402
from callboard.up import agents_of  # noqa: E402
from tests.e2e.procs import child_env, processes, wait_done, wait_online  # noqa: E402
from tests.helpers import eventually_sync  # noqa: E402
from tests.hub.desk.conftest import launch  # noqa: E402

EXAMPLES = sorted((ROOT / "cuelists").glob("*.yaml"))
VIEWPORT = {"width": 1280, "height": 800}


def stage(api: httpx.Client) -> str:
    """Runs of every example; returns the release-dag run left standing by for its GO."""
    for path in EXAMPLES:
        r = api.post(
            "/v1/cuelists", content=path.read_bytes(), headers={"Content-Type": "text/yaml"}
        )
        r.raise_for_status()
    for name in ["demo", "build-test-deploy", "handoff-chain", "shared-runner"]:
        wait_done(api, api.post("/v1/runs", json={"cuelist": name}).json()["run_id"], 60)
    api.post("/v1/runs", json={"cuelist": "demo", "dry": True}).raise_for_status()
    holding = api.post("/v1/runs", json={"cuelist": "release-dag"}).json()["run_id"]

    def standing_by() -> bool:
        run = api.get(f"/v1/runs/{holding}").json()
        return run["cues"]["TEST-300"]["state"] == "completed"

    eventually_sync(standing_by, 60, interval_s=0.1, message="release-dag standing by")
    return str(holding)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    agents = agents_of(EXAMPLES)
    with EmbeddedServer() as server, processes(child_env(server), Path(tempfile.mkdtemp())) as p:
        url = p.hub()
        for agent in agents:
            p.echo(agent)
        with httpx.Client(base_url=url, timeout=30) as api:
            wait_online(api, agents)
            run_id = stage(api)
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
            for name, path in [("board", "/"), ("run", f"/runs/{run_id}")]:
                page.goto(f"{url}{path}")
                page.wait_for_selector("h1")
                target = args.out / f"desk-{name}.png"
                page.screenshot(path=str(target))
                print(
                    f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}"
                )
            browser.close()


if __name__ == "__main__":
    main()
