"""`callboard acl`: the file loads in a real redis-server; specialists reach only their keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import typer
from redis.backoff import NoBackoff
from redis.retry import Retry
from typer.testing import CliRunner

from callboard.acl import acl
from callboard.embedded import EmbeddedServer
from protocols.codec import Envelope, decode, encode, make
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType
from protocols.payloads import CoordGo
from tests.e2e.procs import child_env, processes
from tests.helpers import eventually_sync

pytestmark = pytest.mark.redis
P = "cb:"
K = Keys(P)
SDK = "agent-sdk"  # the streams of an SDK replica's, run as its user


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    folder = tmp_path_factory.mktemp("acl")
    out = folder / "users.acl"
    app = typer.Typer()
    app.command()(acl)
    result = CliRunner().invoke(
        app,
        ["agent-a", "agent-ab", SDK, "--out", str(out), "--hub-password", "hub-pw",
         "--password", "agent-a=a-pw", "--password", f"{SDK}=sdk-pw"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "agent-ab:" in result.output  # generated passwords are printed, given ones not
    assert "a-pw" not in result.output
    text = out.read_text()
    assert text.startswith("user default off\n")
    assert "agent-a*" not in text and "agent-ab*" not in text
    with EmbeddedServer(aclfile=str(out)) as server:
        yield server


def as_user(server: EmbeddedServer, user: str, password: str) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, username=user, password=password)


def test_default_user_is_off(acl_server: EmbeddedServer) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=acl_server.port, retry=Retry(NoBackoff(), 0)).ping()


def test_specialist_uses_its_own_streams(acl_server: EmbeddedServer) -> None:
    hub = as_user(acl_server, "hub", "hub-pw")
    hub.xadd(K.inbox("agent-a"), {"m": "go"})
    hub.xadd(K.broadcast, {"m": "notice"})
    me = as_user(acl_server, "agent-a", "a-pw")
    assert me.ping()
    me.xgroup_create(K.inbox("agent-a"), "agent-a", id="0", mkstream=True)
    rows = me.xreadgroup("agent-a", "r1", {K.inbox("agent-a"): ">"}, count=10)
    entry_id = rows[0][1][0][0]
    assert me.xack(K.inbox("agent-a"), "agent-a", entry_id) == 1
    me.xautoclaim(K.inbox("agent-a"), "agent-a", "r1", 0)
    me.xpending(K.inbox("agent-a"), "agent-a")
    me.xinfo_consumers(K.inbox("agent-a"), "agent-a")
    me.xadd(K.out("agent-a"), {"m": "ack"})
    assert me.xread({K.broadcast: "0"})
    me.xrevrange(K.broadcast, count=1)
    assert me.set(K.done("agent-a", "tok"), 1, nx=True, ex=60)
    assert me.exists(K.done("agent-a", "tok")) == 1
    assert me.delete(K.done("agent-a", "tok")) == 1
    # the SDK's atomic write: its message, a done-marker and the XACK in one MULTI
    hub.xadd(K.inbox("agent-a"), {"m": "go"})
    rows = me.xreadgroup("agent-a", "r1", {K.inbox("agent-a"): ">"}, count=10)
    with me.pipeline(transaction=True) as pipe:
        pipe.xadd(K.out("agent-a"), {"m": "status.rejected"})
        pipe.set(K.done("agent-a", "tok2"), 1, nx=True, ex=60)
        pipe.xack(K.inbox("agent-a"), "agent-a", rows[0][1][0][0])
        assert pipe.execute()[2] == 1


@pytest.mark.parametrize(
    "command",
    [
        ("XADD", K.out("agent-ab"), "*", "m", "x"),  # a longer id with the same start
        # the streams the hub writes: an explicit maximum id there would stop the hub
        ("XADD", K.inbox("agent-a"), "*", "m", "x"),
        ("XADD", K.inbox("agent-a"), "18446744073709551615-18446744073709551615", "m", "x"),
        ("XADD", K.dead, "*", "reason", "forged"),
        ("XADD", K.dead, "18446744073709551615-18446744073709551615", "m", "x"),
        ("XADD", K.dead, "MAXLEN", "0", "*", "m", "wipe"),
        ("XTRIM", K.out("agent-a"), "MAXLEN", "0"),
        ("XDEL", K.inbox("agent-a"), "0-1"),
        ("XGROUP", "SETID", K.inbox("agent-a"), "agent-a", "$"),
        ("XREADGROUP", "GROUP", "agent-a", "r1", "STREAMS", K.out("agent-a"), ">"),
        ("SET", K.inbox("agent-a"), "x"),
        ("XADD", K.done("agent-a", "tok"), "*", "m", "x"),
        ("XREAD", "STREAMS", K.inbox("agent-ab"), "0"),
        ("SET", K.done("agent-ab", "tok"), "1"),
        ("XADD", K.broadcast, "*", "m", "x"),
        ("XRANGE", K.dead, "-", "+"),
        ("GET", K.leader()),
        ("KEYS", "*"),
        ("CONFIG", "GET", "maxmemory"),
        ("FLUSHALL",),
        ("DEL", K.inbox("agent-a")),
        ("XGROUP", "DESTROY", K.inbox("agent-a"), "agent-a"),
    ],
)
def test_specialist_gets_noperm_elsewhere(
    acl_server: EmbeddedServer, command: tuple[str, ...]
) -> None:
    me = as_user(acl_server, "agent-a", "a-pw")
    with pytest.raises(redis.exceptions.NoPermissionError):
        me.execute_command(*command)


def test_hub_may_not_flush_or_read_config(acl_server: EmbeddedServer) -> None:
    hub = as_user(acl_server, "hub", "hub-pw")
    hub.set(f"{P}hub:x", 1)
    for command in (("FLUSHALL",), ("KEYS", "*"), ("CONFIG", "GET", "maxmemory")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            hub.execute_command(*command)
    with pytest.raises(redis.exceptions.NoPermissionError):
        hub.set("other:key", 1)


def test_refuses_bad_agent_ids(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(acl)
    result = CliRunner().invoke(app, ["agent*", "--out", str(tmp_path / "x.acl")])
    assert result.exit_code == 2
    assert not (tmp_path / "x.acl").exists()


def test_a_replica_under_its_user_runs_a_redelivered_go(
    acl_server: EmbeddedServer, tmp_path: Path
) -> None:
    """A GO read by a replica that died is reclaimed (delivered a second time) by an SDK
    replica logged in as its agent's user: it reads the attempt's done-markers, then runs
    and completes it. On the code before, the markers were read with MGET, which the user
    is not granted: NOPERM at every delivery, until the GO was dead-lettered as poison."""
    hub = as_user(acl_server, "hub", "hub-pw")
    inbox, out = K.inbox(SDK), K.out(SDK)
    hub.xgroup_create(inbox, SDK, id="0", mkstream=True)
    go = CoordGo(cue_id="CUE-1", target_agents=[SDK], action={"result": {"x": 1}})
    message = make(MessageType.COORD_GO, go, run_id="run-1", cue_id="CUE-1", target_agents=[SDK])
    hub.xadd(inbox, {STREAM_FIELD: encode(message)})
    hub.xreadgroup(SDK, "ghost", {inbox: ">"}, count=1)  # read by a replica that then died
    url = f"redis://{SDK}:sdk-pw@127.0.0.1:{acl_server.port}/0"
    fast = {"CALLBOARD_MIN_IDLE_MS": "300", "CALLBOARD_CLAIM_INTERVAL_MS": "100"}
    with processes(child_env(acl_server, prefix=P, REDIS_URL=url, **fast), tmp_path) as procs:
        procs.echo(SDK)

        def outcomes() -> list[Envelope]:
            ends = (MessageType.STATUS_COMPLETED, MessageType.STATUS_REJECTED)
            return [m for m in _out(hub, out) if m.message_type in ends]

        [done] = eventually_sync(outcomes, 20, interval_s=0.05, message="the GO's outcome")
        log = procs.log(f"echo-{SDK}-0")
    assert done.message_type is MessageType.STATUS_COMPLETED, log
    payload: Any = done.payload
    assert payload.result == {"x": 1}
    assert "NOPERM" not in log and "no permissions" not in log
    assert hub.xpending(inbox, SDK)["pending"] == 0


def _out(client: redis.Redis, stream: str) -> list[Envelope]:
    return [decode(fields[STREAM_FIELD.encode()]) for _, fields in client.xrange(stream)]
