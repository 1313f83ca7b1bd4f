"""Row 10: the ACL matrix on a real Redis 7 loaded with the file `callboard acl` writes.
Each specialist against every other specialist's keys, against KEYS, CONFIG, FLUSHALL,
DEL, XGROUP DESTROY and the hub's keys, and against the streams the hub writes (its own
inbox, the dead letters: XADD with a maximum id, MAXLEN 0): 100% NOPERM. The default user
is off. The hub and the specialists, each logged in as its own user, run a cuelist to
success."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import typer
from redis.backoff import NoBackoff
from redis.retry import Retry
from typer.testing import CliRunner

from callboard.acl import acl
from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from tests.e2e.procs import Procs, child_env, wait_done, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import start, submit

pytestmark = pytest.mark.slow

AGENTS = ["fx-acl-a", "fx-acl-b", "fx-acl-c"]
PASSWORDS = {"hub": "hub-secret", **{a: f"{a}-secret" for a in AGENTS}}
K = Keys()  # the default prefix, on a server of its own
MAX_ID = "18446744073709551615-18446744073709551615"  # after it, every XADD * fails


def _on_keys_of(other: str, me: str) -> list[tuple[str, ...]]:
    """Everything a replica may do on its own keys, aimed at another agent's."""
    inbox, out, marker = K.inbox(other), K.out(other), K.done(other, "tok")
    return [
        ("XADD", out, "*", "m", "x"),
        ("XADD", out, MAX_ID, "m", "x"),
        ("XADD", inbox, "*", "m", "x"),
        ("XREADGROUP", "GROUP", other, me, "STREAMS", inbox, ">"),
        ("XREAD", "STREAMS", inbox, "0"),
        ("XRANGE", inbox, "-", "+"),
        ("XRANGE", out, "-", "+"),
        ("XREVRANGE", out, "+", "-"),
        ("XLEN", inbox),
        ("XACK", inbox, other, "0-1"),
        ("XCLAIM", inbox, other, me, "0", "0-1"),
        ("XAUTOCLAIM", inbox, other, me, "0", "0"),
        ("XPENDING", inbox, other),
        ("XINFO", "STREAM", inbox),
        ("XINFO", "GROUPS", inbox),
        ("XINFO", "CONSUMERS", inbox, other),
        ("XGROUP", "CREATE", inbox, "thief", "$"),
        ("XGROUP", "CREATECONSUMER", inbox, other, me),
        ("SET", marker, "1", "NX"),
        ("GET", marker),
        ("EXISTS", marker),
        ("DEL", marker),
    ]


def _anywhere(me: str) -> list[tuple[str, ...]]:
    """Server-wide and destructive commands, on its own keys and the hub's."""
    return [
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("CONFIG", "GET", "*"),
        ("CONFIG", "SET", "maxmemory", "1"),
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("DEL", K.inbox(me)),
        ("DEL", K.out(me)),
        ("UNLINK", K.inbox(me)),
        ("XGROUP", "DESTROY", K.inbox(me), me),
        ("XTRIM", K.inbox(me), "MAXLEN", "0"),
        ("XDEL", K.inbox(me), "0-1"),
        ("XADD", K.broadcast, "*", "m", "x"),
        ("XRANGE", K.dead, "-", "+"),
        # the streams the hub writes, which an explicit maximum id would stop for good
        ("XADD", K.inbox(me), "*", "m", "x"),
        ("XADD", K.inbox(me), MAX_ID, "m", "x"),
        ("XADD", K.dead, "*", "reason", "forged", "sender", "someone-else"),
        ("XADD", K.dead, MAX_ID, "m", "x"),
        ("XADD", K.dead, "MAXLEN", "0", "*", "m", "wipe"),
        ("XADD", K.broadcast, MAX_ID, "m", "x"),
        ("XTRIM", K.dead, "MAXLEN", "0"),
        ("XTRIM", K.out(me), "MAXLEN", "0"),
        ("XGROUP", "SETID", K.inbox(me), me, "$"),
        ("XGROUP", "DESTROY", K.out(me), "hub"),
        ("XREADGROUP", "GROUP", "hub", me, "STREAMS", K.out(me), ">"),
        ("XACK", K.out(me), "hub", "0-1"),
        ("GET", K.leader()),
        ("SET", K.leader(), "me"),
        ("INCR", K.fence()),
        ("EVAL", "return 1", "0"),
        ("ACL", "LIST"),
        ("ACL", "SETUSER", me, "+@all"),
        ("CLIENT", "LIST"),
        ("PUBLISH", "anything", "x"),
        ("RENAME", K.inbox(me), K.inbox(me) + "-x"),
    ]


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    out = tmp_path_factory.mktemp("acl") / "users.acl"
    app = typer.Typer()
    app.command()(acl)
    args = [*AGENTS, "--out", str(out), "--hub-password", PASSWORDS["hub"]]
    for agent in AGENTS:
        args += ["--password", f"{agent}={PASSWORDS[agent]}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with EmbeddedServer(aclfile=str(out)) as server:
        yield server


def _url(server: EmbeddedServer, user: str) -> str:
    return f"redis://{user}:{PASSWORDS[user]}@127.0.0.1:{server.port}/0"


def test_acl_matrix(acl_server: EmbeddedServer, tmp_path: Path, figure: Figure) -> None:
    # The hub and the specialists at work, each as its own user: the run must succeed.
    env = child_env(acl_server, prefix=K.prefix, CALLBOARD_LEASE_MS="1500")
    procs = Procs(env, tmp_path)
    try:
        url = procs.hub(REDIS_URL=_url(acl_server, "hub"))
        for agent in AGENTS:
            procs.echo(agent, REDIS_URL=_url(acl_server, agent))
        with httpx.Client(base_url=url, timeout=10) as api:
            wait_online(api, AGENTS)
            submit(
                api,
                {
                    "cuelist": "acl-run",
                    "cues": [
                        {"id": "ALL", "target_agents": AGENTS, "auto_follow": "CTX",
                         "action": {"execute_ms": 10}},
                        {"id": "CTX", "target_agents": AGENTS[:1],
                         "action": {"context": {"built": True}}},
                    ],
                },
            )  # fmt: skip
            run = wait_done(api, start(api, "acl-run"))
            context = api.get(f"/v1/runs/{run['run_id']}/context").json()
    finally:
        procs.stop()

    attempts, refused, leaks = 0, 0, []
    for me in AGENTS:
        client = redis.Redis(
            host="127.0.0.1", port=acl_server.port, username=me, password=PASSWORDS[me]
        )
        assert client.ping()
        commands = [c for other in AGENTS if other != me for c in _on_keys_of(other, me)]
        for command in commands + _anywhere(me):
            attempts += 1
            try:
                client.execute_command(*command)
            except redis.exceptions.NoPermissionError:
                refused += 1
                continue
            except redis.ResponseError as exc:
                leaks.append((me, command, f"not NOPERM: {exc}"))
                continue
            leaks.append((me, command, "allowed"))
        client.close()
    anonymous = redis.Redis(host="127.0.0.1", port=acl_server.port, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.AuthenticationError):
        anonymous.ping()
    anonymous.close()
    figure(
        row=10,
        fault=f"ACL file from `callboard acl` ({len(AGENTS)} specialists + hub) on Redis 7",
        promise="100% NOPERM for each specialist on others' keys, KEYS/CONFIG/FLUSHALL/DEL/"
        "XGROUP DESTROY, and XADD (max id, MAXLEN 0) to its own inbox and the dead letters; "
        "hub works; default user off",
        measured=f"{refused}/{attempts} NOPERM ({100 * refused / attempts:.0f}%); default user "
        f"off (NOAUTH); run as hub+agent users: {run['status']}",
    )
    assert leaks == []
    assert run["status"] == "success"
    assert context["entries"]["built"]["value"] is True
