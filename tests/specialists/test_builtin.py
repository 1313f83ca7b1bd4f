"""The built-in specialists: shell, http, a2a and echo, each run in process, on the real server."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import textwrap
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from itertools import chain
from pathlib import Path
from typing import Any, cast

import pytest
from a2a.helpers import new_text_part
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    Artifact,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import MessageToDict
from pydantic import SecretStr

from protocols.codec import make
from protocols.messages import MessageType
from protocols.payloads import CoordGo, Usage
from specialists.builtin import load
from specialists.builtin.a2a import A2A, A2ASettings
from specialists.builtin.echo import Echo, EchoSettings
from specialists.builtin.http import Http, HttpSettings, idempotency_key
from specialists.builtin.shell import Shell, ShellSettings
from specialists.cue import Cue
from tests.helpers import eventually
from tests.specialists.chunked import Chunked, gzipped
from tests.specialists.conftest import AGENT, HubSide, Starter
from tests.webserver import Answer, Request, serving

pytestmark = pytest.mark.redis

M = MessageType
PY = sys.executable


def _context(messages: list[Any]) -> dict[str, Any]:
    return {m.payload.key: m.payload.value for m in messages if m.message_type == M.TASK_CONTEXT}


# -- shell ------------------------------------------------------------------------------


async def test_shell_runs_argv_and_reports_output(start: Starter, hub: HubSide) -> None:
    await start(Shell)
    await hub.go(
        "CUE-1", argv=[PY, "-c", "import os; print('hi', os.environ['X'])"], env={"X": "42"}
    )
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    assert done.payload.result["exit_code"] == 0
    assert done.payload.result["stdout"] == "hi 42\n"
    assert _context(await hub.out()) == {
        "CUE-1.stdout": "hi 42\n",
        "CUE-1.stderr": "",
        "CUE-1.exit_code": 0,
    }


async def test_shell_nonzero_exit_fails_with_code_and_stderr(
    start: Starter, hub: HubSide, tmp_path: Path
) -> None:
    await start(Shell)
    script = "import sys; sys.stderr.write('it broke'); sys.exit(3)"
    await hub.go("CUE-1", argv=[PY, "-c", script], cwd=str(tmp_path))
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert failed.payload.error == "CommandFailed: exit code 3: it broke"
    assert _context(await hub.out())["CUE-1.exit_code"] == 3


async def test_shell_timeout_and_output_limit(start: Starter, hub: HubSide) -> None:
    await start(Shell, shell_settings=ShellSettings(output_limit_bytes=10))
    await hub.go("CUE-1", argv=[PY, "-c", "import time; time.sleep(30)"], timeout_s=0.3)
    await hub.go("CUE-2", argv=[PY, "-c", "print('x' * 100, end='')"])
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert "timed out after 0.3s" in failed.payload.error
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-2")
    assert done.payload.result["stdout"] == "[...90 bytes cut]xxxxxxxxxx"


async def test_shell_keeps_a_tail_of_output_not_all_of_it(start: Starter, hub: HubSide) -> None:
    """A command printing 64 MiB: its replica holds the tail it reports, not the output.
    On the code before, all of it was read into memory first (and a command printing
    without end grew it until its timeout_s, 300 s by default)."""
    await start(Shell, shell_settings=ShellSettings(output_limit_bytes=16))
    script = "import sys\nfor _ in range(1024): sys.stdout.write('y' * 65535 + 'z')"
    tracemalloc.start()
    try:
        await hub.go("CUE-1", argv=[PY, "-c", script])
        [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1", timeout_s=30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert done.payload.result["stdout"] == f"[...{64 * 2**20 - 16} bytes cut]{'y' * 15}z"
    assert peak < 8 * 2**20  # a few read chunks, not 64 MiB


@pytest.mark.parametrize("argv", [None, [], "echo hi", [1, 2]])
async def test_shell_refuses_bad_argv(start: Starter, hub: HubSide, argv: Any) -> None:
    await start(Shell)
    await hub.go("CUE-1", argv=argv)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert "action.argv must be a non-empty list of strings" in failed.payload.error
    [rejected] = await hub.rejected()
    assert rejected.reason.startswith("rejected: action.argv")


@pytest.mark.parametrize("timeout_s", [0, -1, "10", True, 1e308])
async def test_shell_refuses_a_timeout_that_is_not_one(
    start: Starter, hub: HubSide, timeout_s: Any
) -> None:
    await start(Shell)
    await hub.go("CUE-1", argv=[PY, "-c", "pass"], timeout_s=timeout_s)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert "action.timeout_s must be a number of seconds over 0 and at most 86400" in (
        failed.payload.error
    )


async def test_a_commands_background_child_neither_holds_its_cue_nor_outlives_it(
    start: Starter, hub: HubSide
) -> None:
    """`sh` exited at once, but the child it left kept its output open: the cue waited for
    its timeout, failed as timed out, and the child ran on after it."""
    await start(Shell)
    await hub.go("CUE-1", argv=["sh", "-c", "sleep 30 & echo $!"], timeout_s=20)
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    child = int(done.payload.result["stdout"])
    assert done.payload.result["duration_s"] < 15
    await eventually(lambda: _gone(child), 10)


async def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_child_that_left_the_group_holds_the_cue_no_longer_than_a_grace(
    start: Starter, hub: HubSide, tmp_path: Path
) -> None:
    """A child that left the process group (`setsid`) held the output open: a command that
    exited 0 failed as timed out, and one timed out after 2 s said so only when that child
    ended, 25 s later (Process.wait() waits for the output too, before Python 3.12)."""
    pid_file = tmp_path / "escaped"
    escape = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 60' &"
    await start(Shell)
    try:
        await hub.go("CUE-1", argv=["sh", "-c", f"{escape} sleep 0.3; echo hi"], timeout_s=20)
        [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
        assert done.payload.result["stdout"] == "hi\n" and done.payload.result["duration_s"] < 10
        _kill(pid_file)
        await hub.go("CUE-2", argv=["sh", "-c", f"{escape} exec sleep 60"], timeout_s=1)
        [failed] = await hub.wait(M.STATUS_FAILED, "CUE-2", timeout_s=20)
        assert "timed out after 1s" in failed.payload.error
    finally:
        _kill(pid_file)


def _kill(pid_file: Path) -> None:
    if (pid := _written(pid_file)) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_a_command_dies_with_its_replica_even_by_sigkill(tmp_path: Path) -> None:
    """A replica killed with SIGKILL (or by the OOM killer) runs nothing more: its command,
    in a session of its own, ran on beside the copy of its GO another replica was given,
    and after the run was cancelled. The guard leading its group kills it then."""
    child_file = tmp_path / "child"
    replica = textwrap.dedent(f"""
        import asyncio, sys
        from specialists.builtin.shell import _spawn
        async def main():
            cmd = ["sh", "-c", "echo $$ > {child_file}; sleep 60"]
            proc, watched, transport = await _spawn(cmd, stdin=asyncio.subprocess.DEVNULL)
            print(proc.pid, flush=True)
            await asyncio.sleep(120)
        asyncio.run(main())
    """)  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        PY, "-c", replica, stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parents[2]
    )
    assert process.stdout is not None
    guard = int(await asyncio.wait_for(process.stdout.readline(), 20))
    command = await eventually(lambda: _written(child_file), 20, message="the command started")
    process.kill()  # SIGKILL: nothing of the replica runs
    await process.wait()
    try:
        await eventually(lambda: _gone(command), 10, message="the command killed")
        await eventually(lambda: _gone(guard), 10, message="the guard gone")
    finally:
        for pid in (command, guard):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _written(path: Path) -> int | None:
    """The pid a command wrote to `path`, once it has."""
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else None


async def test_a_command_that_cannot_start_is_refused_as_before(
    start: Starter, hub: HubSide
) -> None:
    await start(Shell)
    await hub.go("CUE-1", argv=["no-such-command-here"])
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert "cannot run 'no-such-command-here'" in failed.payload.error


async def test_a_command_gets_no_credentials_of_its_replica(
    start: Starter, hub: HubSide, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its output is published in the run's context: a command that printed its
    environment published the replica's Redis password and the hub's API key."""
    monkeypatch.setenv("CALLBOARD_API_KEY", "api-s3cret")
    monkeypatch.setenv("PLAIN", "kept")
    await start(Shell)
    names = "k in ('REDIS_URL', 'PLAIN', 'X') or k.startswith('CALLBOARD_')"
    show = f"import os; print(sorted(k for k in os.environ if {names}))"
    await hub.go("CUE-1", argv=[PY, "-c", show], env={"X": "1"})
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    assert done.payload.result["stdout"] == "['PLAIN', 'X']\n"


# -- http -------------------------------------------------------------------------------


class _Web:
    """A JSON webhook: answers each POST with the next of `script`'s status codes (then
    200) and the cue it got; keeps the bodies in `seen`."""

    def __init__(self) -> None:
        self.script: list[int] = []
        self.seen: list[dict[str, Any]] = []
        self.keys: list[str | None] = []  # each request's Idempotency-Key
        self.url = ""

    def __call__(self, request: Request) -> Answer:
        body = json.loads(request.body)
        self.seen.append(body)
        self.keys.append(request.headers.get("idempotency-key"))
        code = self.script.pop(0) if self.script else 200
        answer = json.dumps({"got": body.get("cue_id"), "code": code}).encode()
        return Answer(code, answer, "application/json")


@pytest.fixture
def web() -> Iterator[_Web]:
    hook = _Web()
    with serving(hook) as url:
        hook.url = f"{url}/hook"
        yield hook


async def test_http_posts_the_cue_and_reports_the_json(
    start: Starter, hub: HubSide, web: _Web
) -> None:
    await start(Http, http_settings=HttpSettings(url=web.url, backoff_s=0.01))
    await hub.go("CUE-1", go_context={"spec": 1}, mode="fast")
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    assert done.payload.result == {"status_code": 200, "response": {"got": "CUE-1", "code": 200}}
    [body] = web.seen
    assert body["action"] == {"mode": "fast"} and body["context"] == {"spec": 1}
    assert (body["run_id"], body["attempt"]) == ("run-1", 1)
    assert _context(await hub.out()) == {"CUE-1.response": {"got": "CUE-1", "code": 200}}


async def test_http_retries_5xx_then_fails_on_4xx(start: Starter, hub: HubSide, web: _Web) -> None:
    await start(Http, http_settings=HttpSettings(tries=3, backoff_s=0.01))
    web.script[:] = [503, 502]
    await hub.go("CUE-1", url=web.url, body={"custom": True})
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    assert done.payload.result["status_code"] == 200
    assert web.seen == [{"custom": True}] * 3
    web.script[:] = [404]
    await hub.go("CUE-2", url=web.url)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-2")
    assert "HTTP 404" in failed.payload.error


async def test_http_fails_on_a_redirect_it_does_not_follow(
    start: Starter, hub: HubSide, web: _Web
) -> None:
    """A 302 answering the POST was reported completed, the work never done."""
    await start(Http, http_settings=HttpSettings(backoff_s=0.01))
    web.script[:] = [302]
    await hub.go("CUE-1", url=web.url)
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert "HTTP 302" in failed.payload.error


async def test_http_sends_one_idempotency_key_per_attempt_on_every_try(
    start: Starter, hub: HubSide, web: _Web
) -> None:
    """A 5xx may come after the server did the work: the tries of one attempt carry one
    key, so a server that honours it does the work once; the next attempt is a new key,
    and a key the action's headers set is kept."""
    await start(Http, http_settings=HttpSettings(tries=3, backoff_s=0.01))
    web.script[:] = [502, 500]
    await hub.go("CUE-1", url=web.url)
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    first = web.keys[0]
    assert first is not None and web.keys == [first] * 3
    await hub.go("CUE-1", attempt=2, url=web.url)
    await hub.wait(M.STATUS_COMPLETED, "CUE-1", n=2)
    assert web.keys[3] not in (None, first)
    await hub.go("CUE-2", url=web.url, headers={"idempotency-KEY": "mine"})
    await hub.wait(M.STATUS_COMPLETED, "CUE-2")
    assert web.keys[4] == "mine"


def test_the_idempotency_key_names_the_attempt_not_the_replica_or_the_delivery() -> None:
    def cue(run_id: str | None, attempt: int, replica: str, message_id: str) -> Cue:
        go = CoordGo(cue_id="C", target_agents=["web"], attempt=attempt)
        message = make(MessageType.COORD_GO, go, message_id=message_id)
        return Cue(agent_id="web", replica=replica, run_id=run_id, cue_id="C",
                   attempt=attempt, message=message, markers=cast(Any, None))  # fmt: skip

    key = idempotency_key(cue("run-1", 1, "r1", "m1"))
    assert idempotency_key(cue("run-1", 1, "r2", "m2")) == key  # another replica, a copy
    assert str(uuid.UUID(key)) == key
    assert idempotency_key(cue("run-1", 2, "r1", "m1")) != key
    assert idempotency_key(cue("run-2", 1, "r1", "m1")) != key
    outside = idempotency_key(cue(None, 1, "r1", "m1"))  # a GO outside any run
    assert (
        outside
        == idempotency_key(cue(None, 1, "r2", "m1"))
        != idempotency_key(cue(None, 1, "r1", "m2"))
    )


async def test_http_gives_up_on_a_dead_server_and_without_a_url(
    start: Starter, hub: HubSide, web: _Web
) -> None:
    await start(Http, http_settings=HttpSettings(tries=2, backoff_s=0.01))
    web.script[:] = [500, 500, 500]
    await hub.go("CUE-1", url=web.url)
    await hub.go("CUE-2")
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert "ServerError: HTTP 500" in failed.payload.error
    assert len(web.seen) == 2
    [no_url] = await hub.wait(M.STATUS_FAILED, "CUE-2")
    assert "no usable URL" in no_url.payload.error


class _Streamed(Chunked):
    """An HTTP server that answers every request 200 with a chunked JSON body of `chunks`
    chunks of `chunk` bytes, `pause_s` apart."""

    def __init__(self, chunk: bytes, chunks: int, pause_s: float = 0.0) -> None:
        super().__init__()
        self.chunk, self.chunks, self.pause_s = chunk, chunks, pause_s

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")  # the body we were sent does not matter
            body = (self.chunk for _ in range(self.chunks))
            await self.send(writer, b"application/json", body, pause_s=self.pause_s)
        except ConnectionError:
            pass
        finally:
            self.done.set()
            writer.close()


@asynccontextmanager
async def _streaming(answer: _Streamed) -> AsyncIterator[str]:
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/hook"


async def test_http_stops_reading_an_answer_past_one_message(start: Starter, hub: HubSide) -> None:
    """A 64 MiB answer: reading stops past the 256 KiB a message may hold and the cue fails
    saying so. On the code before, all of it was read (and decoded, and parsed) before the
    cue failed, as it could not be sent: a bigger or endless body grew memory without end."""
    await start(Http, http_settings=HttpSettings(tries=1))
    huge = _Streamed(b" " * 65536, chunks=1024)
    async with _streaming(huge) as url:
        await hub.go("CUE-1", url=url)
        [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1", timeout_s=10)
        await asyncio.wait_for(huge.done.wait(), 5)
    assert "over the 262144-byte limit" in failed.payload.error
    assert huge.sent < 8 * 1024 * 1024  # what the socket's buffers take, not the 64 MiB


async def test_http_timeout_bounds_the_whole_answer_not_each_read(
    start: Starter, hub: HubSide
) -> None:
    """A server dripping its answer a byte every 50 ms never lets a 1 s read timeout pass:
    the cue's timeout_s bounds the whole exchange. On the code before, the cue waited for
    as long as the drip went on (the hub's go_timeout_s, 600 s by default)."""
    await start(Http, http_settings=HttpSettings(tries=1))
    drip = _Streamed(b" ", chunks=1_000_000, pause_s=0.05)
    async with _streaming(drip) as url:
        await hub.go("CUE-1", url=url, timeout_s=1)
        [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1", timeout_s=5)
        await asyncio.wait_for(drip.done.wait(), 5)  # the specialist hung up
    assert "no whole answer within 1 s" in failed.payload.error


# -- a2a --------------------------------------------------------------------------------


async def test_a2a_stops_reading_a_card_past_one_message(start: Starter, hub: HubSide) -> None:
    """An agent card of 64 MiB: reading stops past the 256 KiB a message may hold and the
    cue is not ready, saying so. On the code before, the SDK's A2ACardResolver read all of
    it (a bigger or endless card grew memory without end), then failed to parse it."""
    await start(A2A)
    huge = _Streamed(b" " * 65536, chunks=1024)
    async with _streaming(huge) as url:
        await hub.warning("CUE-1", url=url)
        await hub.standby("CUE-1")
        [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1", timeout_s=10)
        await asyncio.wait_for(huge.done.wait(), 5)
    assert not ack.payload.ready
    assert "agent card" in ack.payload.reason
    assert "over the 262144-byte limit" in ack.payload.reason
    assert huge.sent < 8 * 1024 * 1024  # what the socket's buffers take, not the 64 MiB


async def test_a2a_sends_its_token_to_the_agents_own_origin_only(
    start: Starter, hub: HubSide
) -> None:
    """A card naming another host as its interface had the token sent there with the cue."""
    elsewhere: list[str | None] = []
    own: list[str | None] = []

    def other(req: Request) -> Answer:
        elsewhere.append(req.headers.get("authorization"))
        return Answer(500, b"{}", "application/json")

    with serving(other) as other_url:

        def agent(req: Request) -> Answer:
            own.append(req.headers.get("authorization"))
            rest = AgentInterface(
                url=f"{other_url}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            )
            card = AgentCard(
                name="elsewhere", description="d", version="1", supported_interfaces=[rest],
                capabilities=AgentCapabilities(streaming=False),
            )  # fmt: skip
            return Answer(200, json.dumps(MessageToDict(card)).encode(), "application/json")

        with serving(agent) as agent_url:
            settings = A2ASettings(tokens={agent_url: SecretStr("for-the-agent-only")})
            await start(A2A, a2a_settings=settings)
            await hub.go("CUE-1", url=agent_url)
            await hub.wait(M.STATUS_FAILED, "CUE-1", timeout_s=20)
    assert own and set(own) == {"Bearer for-the-agent-only"}  # its card, from its origin
    assert elsewhere and set(elsewhere) == {None}  # the call went there, the token did not


class _HostileAgent(Chunked):
    """An A2A agent that answers any message without measure (its card first, on a GET):
    `appending`, a stream of a working task and 1,024 artifact updates each appending 64 KiB
    to one artifact, never ending the task; else 64 MiB in one piece: a JSON body (`json`,
    or `gzip`ped on the way: 64 KiB on the wire; its card says it does not stream) or one
    server-sent event with no end of line (`event`)."""

    def __init__(self, framing: str) -> None:
        super().__init__()
        self.framing = framing

    def _answer(self) -> tuple[bytes, Iterable[bytes]]:
        x64k = (b"x" * 65536 for _ in range(1024))
        if self.framing == "appending":
            return b"text/event-stream", self._appended()
        if self.framing == "event":
            return b"text/event-stream", chain([b'data: {"task": {"id": "'], x64k)
        body = chain([b'{"task": {"id": "'], x64k, [b'"}}'])
        return b"application/json", gzipped(body) if self.framing == "gzip" else body

    def _appended(self) -> Iterator[bytes]:
        working = TaskStatus(state=TaskState.TASK_STATE_WORKING)
        yield _sse(StreamResponse(task=Task(id="t-1", context_id="c-1", status=working)))
        more = Artifact(artifact_id="log", name="log", parts=[new_text_part("x" * 65536)])
        update = TaskArtifactUpdateEvent(
            task_id="t-1", context_id="c-1", artifact=more, append=True
        )
        event = _sse(StreamResponse(artifact_update=update))
        for _ in range(1024):
            yield event

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET"):
                port = writer.get_extra_info("sockname")[1]
                card = _card(port, streaming=self.framing in ("event", "appending"))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                             % (len(card), card))  # fmt: skip
                await writer.drain()
                return
            kind, chunks = self._answer()
            extra = b"Content-Encoding: gzip\r\n" if self.framing == "gzip" else b""
            await self.send(writer, kind, chunks, extra=extra)
        except ConnectionError:
            pass
        finally:
            self.done.set()
            writer.close()


def _card(port: int, *, streaming: bool) -> bytes:
    """The agent card of a hostile agent on `port`: one HTTP+JSON interface."""
    rest = AgentInterface(
        url=f"http://127.0.0.1:{port}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
    )
    card = AgentCard(
        name="hostile", description="answers without measure", version="1",
        supported_interfaces=[rest], capabilities=AgentCapabilities(streaming=streaming),
    )  # fmt: skip
    return json.dumps(MessageToDict(card)).encode()


@pytest.mark.parametrize("framing", ["json", "gzip", "event"])
async def test_a2a_stops_reading_an_answer_past_one_message(
    start: Starter, hub: HubSide, framing: str
) -> None:
    """An agent answering a message with 64 MiB in one piece: reading stops past the 256 KiB
    a message may hold, whether the answer is a plain body, a gzip bomb or one event, and
    the cue fails saying so; the replica goes on. On the code before, the a2a-sdk read the
    body (or the event's line) whole: 64 MiB sent, and a peak of hundreds of MiB in the
    replica, before the task failed to parse or was found too big."""
    await start(A2A)
    huge = _HostileAgent(framing)
    server = await asyncio.start_server(huge, "127.0.0.1", 0)
    async with server:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        tracemalloc.start()
        try:
            await hub.go("CUE-1", url=url)
            [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1", timeout_s=30)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await asyncio.wait_for(huge.done.wait(), 5)
    what = "an event from" if framing == "event" else "the answer from"
    assert f"{what} {url}/rest/" in failed.payload.error
    assert "is over the 262144-byte limit of a message: not read further" in failed.payload.error
    assert huge.sent < 8 * 1024 * 1024  # what the socket's buffers take, not the 64 MiB
    assert peak < 8 * 1024 * 1024  # a few read chunks, not 64 MiB


def _sse(event: StreamResponse) -> bytes:
    return b"data: %s\n\n" % json.dumps(MessageToDict(event)).encode()


async def test_a2a_stops_following_a_task_past_one_message(start: Starter, hub: HubSide) -> None:
    """An agent appending 64 KiB parts to an artifact without end: once the task held is
    past the 256 KiB a message may hold, the cue fails saying so. On the code before, every
    part was kept (64 MiB sent, each event copying the task whole) until the hub's
    go_timeout_s, and the result could not have been sent anyway."""
    await start(A2A)
    endless = _HostileAgent("appending")
    server = await asyncio.start_server(endless, "127.0.0.1", 0)
    async with server:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        await hub.go("CUE-1", url=url)
        [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1", timeout_s=10)
        await asyncio.wait_for(endless.done.wait(), 5)
    assert "the remote task t-1 is over the 262144-byte limit" in failed.payload.error
    assert endless.sent < 8 * 1024 * 1024  # what the socket's buffers take, not the 64 MiB


# -- echo -------------------------------------------------------------------------------


async def test_echo_prepare_ms_delays_the_standby_ack(start: Starter, hub: HubSide) -> None:
    await start(Echo)
    await hub.warning("CUE-1", prepare_ms=300)
    standby = await hub.standby("CUE-1")
    [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1")
    assert ack.payload.ready
    assert (ack.sent_at - standby.sent_at).total_seconds() >= 0.25
    await hub.standby("CUE-2")  # no WARNING here: the delay is spent in the ready check
    await hub.warning("CUE-3", ready=False, ready_reason="no slot")
    await hub.standby("CUE-3")
    [not_ready] = await hub.wait(M.ACK_STANDBY, "CUE-3")
    assert (not_ready.payload.ready, not_ready.payload.reason) == (False, "no slot")


async def test_echo_context_then_handoff_then_completed(start: Starter, hub: HubSide) -> None:
    await start(Echo)
    handoff = {"to": "agent-b", "context": {"code": "ok"}, "next_steps": ["test it"]}
    await hub.go("CUE-1", execute_ms=50, context={"a": 1, "b": [2]}, handoff=handoff)
    await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    out = [m for m in await hub.out() if m.cue_id == "CUE-1"]
    assert [m.message_type for m in out] == [
        M.STATUS_STARTED,
        M.TASK_CONTEXT,
        M.TASK_CONTEXT,
        M.TASK_HANDOFF,
        M.STATUS_COMPLETED,
    ]
    assert _context(out) == {"a": 1, "b": [2]}
    sent = out[3].payload
    assert (sent.from_agent, sent.to_agent, sent.task_id) == (AGENT, "agent-b", "CUE-1")
    assert sent.handoff_context.model_dump() == {
        "work_completed": [],
        "artifacts_produced": [],
        "next_steps": ["test it"],
        "constraints": [],
        "code": "ok",
    }


async def test_echo_fail_true_and_once(start: Starter, hub: HubSide) -> None:
    await start(Echo)
    await hub.go("CUE-1", fail=True)
    await hub.go("CUE-2", fail="once")
    await hub.go("CUE-2", attempt=2, fail="once")
    [failed_1] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    [failed_2] = await hub.wait(M.STATUS_FAILED, "CUE-2")
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-2")
    assert "scripted failure" in failed_1.payload.error
    assert (failed_2.payload.attempt, done.payload.attempt) == (1, 2)


async def test_echo_result_is_reported_as_given(start: Starter, hub: HubSide) -> None:
    await start(Echo)
    await hub.go("CUE-1", result={"answer": 42})
    await hub.go("CUE-2", note="no result given")
    [given] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    [default] = await hub.wait(M.STATUS_COMPLETED, "CUE-2")
    assert given.payload.result == {"answer": 42}
    assert default.payload.result == {"echo": {"note": "no result given"}}


async def test_echo_reports_the_usage_its_action_gives(start: Starter, hub: HubSide) -> None:
    await start(Echo)
    await hub.go("CUE-1", usage={"tokens": 1200, "cost": 0.25, "counters": {"api_calls": 3}})
    await hub.go("CUE-2")
    await hub.go("CUE-3", usage={"tokens": -1})
    [given] = await hub.wait(M.STATUS_COMPLETED, "CUE-1")
    [none] = await hub.wait(M.STATUS_COMPLETED, "CUE-2")
    [bad] = await hub.wait(M.STATUS_FAILED, "CUE-3")  # not a usage: the work fails, saying so
    assert given.payload.usage == Usage(tokens=1200, cost=0.25, counters={"api_calls": 3})
    assert none.payload.usage is None
    assert "tokens" in bad.payload.error


async def test_echo_fail_rate_is_seedable(start: Starter, hub: HubSide) -> None:
    await start(Echo, echo_settings=EchoSettings(fail_rate=1.0, seed=7))
    await hub.go("CUE-1")
    [failed] = await hub.wait(M.STATUS_FAILED, "CUE-1")
    assert "random failure" in failed.payload.error
    a, b = (
        Echo(AGENT, echo_settings=EchoSettings(seed=3)),
        Echo(AGENT, echo_settings=EchoSettings(seed=3)),
    )
    assert [a.random.random() for _ in range(3)] == [b.random.random() for _ in range(3)]


def test_load_kinds() -> None:
    assert load("shell") is Shell and load("http") is Http and load("echo") is Echo
    assert load("tests.specialists.sample:Scripted").kind == "scripted"
    for bad in ("nope", "tests.specialists.sample:Missing", "protocols.settings:Settings"):
        with pytest.raises(ValueError):
            load(bad)


def test_kind_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALLBOARD_SHELL_TIMEOUT_S", "7")
    monkeypatch.setenv("CALLBOARD_HTTP_URL", "http://127.0.0.1:1/x")
    monkeypatch.setenv("CALLBOARD_ECHO_PREPARE_MS", "25")
    assert ShellSettings().timeout_s == 7
    assert HttpSettings().url == "http://127.0.0.1:1/x"
    assert EchoSettings().prepare_ms == 25
