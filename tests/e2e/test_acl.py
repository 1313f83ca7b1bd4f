"""`callboard acl`: the file loads in a real redis-server; specialists reach only their keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import typer
from redis.backoff import NoBackoff
from redis.retry import Retry
from typer.testing import CliRunner

from callboard.acl import acl
from callboard.embedded import EmbeddedServer
from protocols.keys import Keys

pytestmark = pytest.mark.redis
P = "cb:"
K = Keys(P)


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    folder = tmp_path_factory.mktemp("acl")
    out = folder / "users.acl"
    app = typer.Typer()
    app.command()(acl)
    result = CliRunner().invoke(
        app,
        ["agent-a", "agent-ab", "--out", str(out), "--hub-password", "hub-pw",
         "--password", "agent-a=a-pw"],
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
