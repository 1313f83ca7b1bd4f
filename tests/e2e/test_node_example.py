"""The Node.js specialist of examples/node/ (written from PROTOCOL.md alone): it passes the
conformance kit, and completes one cue together with a Python specialist through a real hub.

Its one package (`redis`) is installed with `npm ci` from the committed package-lock.json.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from callboard.acl import render
from callboard.conformance import ALL_CHECKS, Timing, run_kit
from callboard.embedded import EmbeddedServer
from protocols.codec import Envelope, decode
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.transport import Probe
from tests.e2e.procs import ROOT, Procs, child_env, processes, wait_done, wait_online

pytestmark = [pytest.mark.redis, pytest.mark.slow]
NODE_DIR = ROOT / "examples" / "node"
SPECIALIST = NODE_DIR / "specialist.js"


@pytest.fixture(scope="module")
def node() -> str:
    """The `node` binary, with the example's packages installed exactly as locked."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm must be on PATH: the Node example is tested in CI"
    lock = (NODE_DIR / "package-lock.json").read_bytes()
    stamp = NODE_DIR / "node_modules" / ".installed-from-lock"
    digest = hashlib.sha256(lock).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        stamp.write_text(digest)
    return node


def test_the_node_specialist_passes_the_conformance_kit(
    node: str, env: dict[str, str], tmp_path: Path
) -> None:
    log = tmp_path / "node.log"
    argv = [sys.executable, "-m", "callboard.cli", "conformance", "--agent", "node-ok"]
    argv += ["-o", "json", "--agent-log", str(log), "--", node, str(SPECIALIST)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr + log.read_text()
    report = json.loads(done.stdout)
    assert [c["check"] for c in report["checks"]] == list(ALL_CHECKS)
    assert all(c["passed"] for c in report["checks"]), report


async def test_the_node_specialist_needs_only_the_rights_protocol_md_gives_it(
    node: str, tmp_path: Path
) -> None:
    # A server that knows only the users `callboard acl` writes: the agent runs with its own
    # credentials, the kit (standing in for the hub) with the hub's.
    aclfile = tmp_path / "users.acl"
    aclfile.write_text(render(["node-acl"], "cb:", {"hub": "hub-pw", "node-acl": "node-pw"}))
    with EmbeddedServer(aclfile=str(aclfile)) as server:
        agent_url = f"redis://node-acl:node-pw@127.0.0.1:{server.port}/0"
        with processes({**child_env(server, "cb:"), "REDIS_URL": agent_url}, tmp_path) as procs:
            agent = procs.spawn("node-acl", [node, str(SPECIALIST), "node-acl"])
            hub_url = f"redis://hub:hub-pw@127.0.0.1:{server.port}/0"
            timing = Timing(settle_s=0.5)
            report = await run_kit(hub_url, "node-acl", prefix="cb:", timing=timing)
            assert agent.poll() is None, procs.log("node-acl")
    assert [(r.check, r.detail) for r in report.results if not r.passed] == []


@pytest.fixture
def procs(redis_server: EmbeddedServer, prefix: str, tmp_path: Path) -> Iterator[Procs]:
    with processes(child_env(redis_server, prefix), tmp_path) as started:
        yield started


CUELIST = {
    "cuelist": "node-and-python",
    "description": "one cue, two specialists in two languages",
    "cues": [
        {
            "id": "CUE-1",
            "target_agents": ["node-agent", "py-agent"],
            "action": {"execute_ms": 50, "result": {"built": True}},
        },
        {"id": "CUE-2", "target_agents": ["node-agent"], "depends_on": ["CUE-1"]},
    ],
}


def test_node_and_python_complete_one_cue_together(
    node: str, procs: Procs, redis_server: EmbeddedServer, keys: Keys
) -> None:
    url = procs.hub()
    procs.echo("py-agent")
    node_agent = procs.spawn("node-agent", [node, str(SPECIALIST), "node-agent"])
    with httpx.Client(base_url=url, timeout=30) as api:
        wait_online(api, ["node-agent", "py-agent"])
        assert api.post("/v1/cuelists", json=CUELIST).status_code == 201
        run_id = api.post("/v1/runs", json={"cuelist": "node-and-python"}).json()["run_id"]
        run = wait_done(api, run_id)
    assert run["status"] == "success", run
    cue = run["cues"]["CUE-1"]  # type: ignore[index]
    assert cue["targets"] == {"node-agent": "completed", "py-agent": "completed"}
    assert run["cues"]["CUE-2"]["state"] == "completed"  # type: ignore[index]
    # one GO to both: the same envelope in each inbox, each answered by its own agent
    gos = {}
    for agent in ("node-agent", "py-agent"):
        inbox = _stream(redis_server, keys, keys.inbox(agent))
        [gos[agent]] = [m for m in inbox if m.message_type is T.COORD_GO and m.cue_id == "CUE-1"]
    assert gos["node-agent"].message_id == gos["py-agent"].message_id
    assert set(gos["node-agent"].target_agents) == {"node-agent", "py-agent"}
    said = _stream(redis_server, keys, keys.out("node-agent"))
    [done] = [m for m in said if m.message_type is T.STATUS_COMPLETED and m.cue_id == "CUE-1"]
    assert done.in_reply_to == gos["node-agent"].message_id
    assert done.payload.result == {"built": True}  # type: ignore[attr-defined]
    assert said[0].message_type is T.STATUS_ONLINE
    node_agent.terminate()  # SIGTERM: it drains, says status.offline and exits
    assert node_agent.wait(15) == 0
    said = _stream(redis_server, keys, keys.out("node-agent"))
    assert said[-1].message_type is T.STATUS_OFFLINE


def _stream(server: EmbeddedServer, keys: Keys, key: str) -> list[Envelope]:
    async def read() -> list[Envelope]:
        probe: Probe = Probe.from_url(server.url, keys)
        try:
            return [decode(d.raw) for d in await probe.entries(key)]
        finally:
            await probe.close()

    return asyncio.run(read())
