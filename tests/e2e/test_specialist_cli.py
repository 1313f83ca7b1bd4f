"""`callboard specialist` as a user runs it: the console script from the module's own
folder, settings named in --help, and one clear line (no traceback) when Redis is away."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes, wait_done, wait_online
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
# the console script, not `python -m` (which puts the current directory on sys.path itself)
CALLBOARD = str(Path(sys.executable).parent / "callboard")
MODULE = """
from specialists import Specialist


class Joiner(Specialist):
    kind = "joiner"

    async def execute(self, cue):
        if cue.action.get("explode"):
            raise ValueError("boom from joiner")
        return {"joined": True}
"""


class Refuser:
    """A port that accepts connections and closes them at once: a Redis that is not there,
    which also counts how often it was tried (so a test waits on tries, not on time)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.tries = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.tries += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def refuser() -> Iterator[Refuser]:
    found = Refuser()
    yield found
    found.close()


def test_a_module_class_from_its_own_folder_joins_and_its_crash_reaches_its_log(
    redis_server: EmbeddedServer, tmp_path: Path
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "joinmod.py").write_text(MODULE)
    agent = f"joiner-{uuid.uuid4().hex[:6]}"
    env = child_env(redis_server)
    log_path = tmp_path / "joiner.log"
    with processes(env, tmp_path) as procs:
        url = procs.hub()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [CALLBOARD, "specialist", "joinmod:Joiner", "--agent", agent],
                cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.procs.append(proc)  # stopped with the hub
        cuelist = {
            "cuelist": "joiner",
            "cues": [{"id": "BOOM", "target_agents": [agent], "action": {"explode": True}}],
        }
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, [agent])
            assert api.post("/v1/cuelists", json=cuelist).status_code == 201
            run_id = api.post("/v1/runs", json={"cuelist": "joiner"}).json()["run_id"]
            run = wait_done(api, run_id)
    assert run["status"] == "failed"
    assert "ValueError: boom from joiner" in str(run["cues"]["BOOM"]["error"])  # type: ignore[index]
    text = log_path.read_text()
    assert "No module named" not in text
    # the hub has one line; the replica's own log has the whole traceback
    assert "Traceback (most recent call last)" in text and 'joinmod.py", line' in text


def test_help_names_the_environment() -> None:
    done = subprocess.run(
        [CALLBOARD, "specialist", "--help"], capture_output=True, text=True, timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name in ("REDIS_URL", "CALLBOARD_PREFIX", "CALLBOARD_API_URL", "CALLBOARD_API_KEY"):
        assert f"env var: {name}" in done.stdout


def _lines_about_redis(text: str) -> list[str]:
    return [line for line in text.splitlines() if "unreachable" in line]


def test_unreachable_redis_is_one_line_in_the_specialist(refuser: Refuser, tmp_path: Path) -> None:
    env = {**child_env_without_server(), "REDIS_URL": refuser.url}
    log_path = tmp_path / "specialist.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [CALLBOARD, "specialist", "echo", "--agent", "nowhere"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually_sync(lambda: refuser.tries >= 12, 60, interval_s=0.05, message="12 tries")
        assert proc.poll() is None  # still trying, not crashed
    finally:
        proc.terminate()
        code = proc.wait(30)
    text = log_path.read_text()
    assert code == 0, text
    assert "Traceback" not in text
    [line] = _lines_about_redis(text)
    assert refuser.url.removesuffix("/0") in line and "REDIS_URL" in line


def test_unreachable_redis_is_one_line_in_the_hub(refuser: Refuser, tmp_path: Path) -> None:
    env = {**child_env_without_server(), "REDIS_URL": refuser.url}
    with processes(env, tmp_path) as procs:
        proc = procs.spawn(
            "hub", [sys.executable, "-m", "hub.main", "--port", "0"]
        )  # a port of its own: nobody calls it here
        eventually_sync(lambda: refuser.tries >= 12, 60, interval_s=0.05, message="12 tries")
        assert proc.poll() is None
    text = procs.log("hub")
    assert "Traceback" not in text, text
    [line] = _lines_about_redis(text)
    assert refuser.url.removesuffix("/0") in line


def child_env_without_server() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLBOARD_")}
    env.pop("REDIS_URL", None)
    return {**env, "PYTHONUNBUFFERED": "1", "CALLBOARD_PREFIX": f"t{uuid.uuid4().hex[:8]}:"}


def test_redis_going_away_and_back_is_lines_not_tracebacks(tmp_path: Path) -> None:
    with EmbeddedServer() as server:  # its own server: this test stops it
        env = child_env(server)
        with processes(env, tmp_path) as procs:
            url = procs.hub()
            procs.echo("comes-back")
            with httpx.Client(base_url=url, timeout=5) as api:
                wait_online(api, ["comes-back"])
                server.stop()

                def said(name: str, words: str) -> bool:
                    return words in (tmp_path / f"{name}.log").read_text(errors="replace")

                hub_log = next(p.stem for p in tmp_path.glob("hub-*.log"))
                echo_log = next(p.stem for p in tmp_path.glob("echo-*.log"))
                eventually_sync(lambda: said(hub_log, "unreachable"), 60, interval_s=0.1)
                eventually_sync(lambda: said(echo_log, "failed"), 60, interval_s=0.1)
                server.start()  # same port, same data folder

                def leading() -> bool:
                    try:
                        return api.get("/healthz").json().get("leader") is True
                    except httpx.HTTPError:
                        return False

                eventually_sync(leading, 60, interval_s=0.1, message="the hub leads again")
                eventually_sync(lambda: said(echo_log, "reads again"), 60, interval_s=0.1)
    for name in (hub_log, echo_log):
        text = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "Traceback" not in text, text[-3000:]
