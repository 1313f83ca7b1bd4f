"""Row 7: Redis restarted (SIGTERM, AOF with appendfsync everysec) while a producer writes
~500 msg/s to a specialist's inbox and a hub runs a cuelist. Zero acknowledged messages
lost, consumer groups intact, every client back within 5 s, every run and task finishes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from protocols.messages import MessageType
from tests.e2e.procs import Procs, child_env, wait_done, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import assign, entry_ms, messages, of_type, start, submit
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

RATE = 500  # messages per second
LOAD_S = 6.0
RESTART_AT_S = 2.5
RECONNECT_S = 5.0
LOAD_AGENT = "fx-load"
AGENTS = ["fx-aof-a", "fx-aof-b"]
CUELIST = {
    "cuelist": "across-restart",
    "cues": [
        {"id": f"C{i}", "target_agents": AGENTS, "action": {"execute_ms": 700},
         "auto_follow": f"C{i + 1}" if i < 5 else None}
        for i in range(6)
    ],
}  # fmt: skip


@pytest.fixture
def aof_server() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(appendonly=True) as server:
        yield server


class Producer(threading.Thread):
    """XADDs task.assign at RATE/s; keeps every entry id the server acknowledged."""

    def __init__(self, url: str, stream: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1)
        self.stream = stream
        self.acked: dict[str, str] = {}  # entry id -> task id
        self.failures = 0
        self.gap_end = 0.0  # first success after a failure (time.time)

    def run(self) -> None:
        begin = time.monotonic()
        n = 0
        while (now := time.monotonic()) - begin < LOAD_S:
            due = int((now - begin) * RATE)
            while n < due:
                task = f"L{n:05}"
                try:
                    entry = self.client.xadd(self.stream, {"m": assign(LOAD_AGENT, "load", task)})
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    self.failures += 1
                    time.sleep(0.01)  # pacing a retry of the same message, bounded by LOAD_S
                    continue
                if self.failures and not self.gap_end:
                    self.gap_end = time.time()
                self.acked[entry.decode()] = task
                n += 1
            time.sleep(0.005)  # pacing: the next 2-3 messages are due in 5 ms
        self.client.close()


def test_redis_restart_with_aof_under_load_loses_nothing(
    aof_server: EmbeddedServer, tmp_path: Path, figure: Figure
) -> None:
    env = child_env(aof_server, CALLBOARD_LEASE_MS="3000", CALLBOARD_MIN_IDLE_MS="2000")
    load_env = child_env(aof_server, CALLBOARD_CONCURRENCY="50")
    keys, load_keys = Keys(env["CALLBOARD_PREFIX"]), Keys(load_env["CALLBOARD_PREFIX"])
    procs, load = Procs(env, tmp_path), Procs(load_env, tmp_path)
    r = redis.Redis.from_url(aof_server.url)
    try:
        url = procs.hub()
        for agent in AGENTS:
            procs.echo(agent)
        load.echo(LOAD_AGENT)
        load.echo(LOAD_AGENT)
        api = httpx.Client(base_url=url, timeout=10)
        wait_online(api, AGENTS)
        eventually_sync(
            lambda: len(of_type(messages(r, load_keys.out(LOAD_AGENT)), MessageType.STATUS_ONLINE))
            == 2,
            30, message="load replicas online",
        )  # fmt: skip
        submit(api, CUELIST)
        run_ids = [start(api, "across-restart")]
        producer = Producer(aof_server.url, load_keys.inbox(LOAD_AGENT))
        producer.start()
        eventually_sync(
            lambda: len(producer.acked) >= RATE * RESTART_AT_S, 10, message="load running"
        )
        r.close()
        aof_server.restart()
        up = time.time()
        hub_back = eventually_sync(
            lambda: _healthy(api) and time.time(), 30, interval_s=0.02, message="hub back"
        )
        r = redis.Redis.from_url(aof_server.url)
        run_ids.append(start(api, "across-restart"))  # a run started after the restart too
        producer.join(LOAD_S + 30)
        acked = producer.acked
        inbox = {entry_id for entry_id, _ in messages(r, load_keys.inbox(LOAD_AGENT))}

        def all_done() -> set[str] | None:
            rows = of_type(messages(r, load_keys.out(LOAD_AGENT)), MessageType.STATUS_COMPLETED)
            done = {m["cue_id"] for m in rows}
            return done if set(acked.values()) <= done else None

        done = eventually_sync(all_done, 30, interval_s=0.2, message="every task completed")
        runs = [wait_done(api, run_id, timeout_s=60) for run_id in run_ids]
        back_ms = {"producer": (producer.gap_end or up) - up, "hub": hub_back - up}
        for name, stream in [(a, keys.out(a)) for a in AGENTS] + [
            (f"{LOAD_AGENT}/{i}", load_keys.out(LOAD_AGENT)) for i in (0, 1)
        ]:
            back_ms[name] = _first_after(r, stream, up, name) - up
        groups = {
            stream: {g["name"].decode() for g in r.xinfo_groups(stream)}
            for stream in [keys.out(a) for a in AGENTS]
            + [keys.inbox(a) for a in AGENTS]
            + [load_keys.inbox(LOAD_AGENT)]
        }
        lost = set(acked) - inbox
        worst = max(back_ms, key=lambda k: back_ms[k])
        unfinished = len(set(acked.values()) - done)
        figure(
            row=7,
            fault=f"Redis restarted (AOF, everysec) under ~{RATE} msg/s for {LOAD_S:g} s",
            promise=f"0 acknowledged messages lost; groups intact; clients back <= "
            f"{RECONNECT_S:g} s; runs finish",
            measured=f"{len(acked)} acknowledged, {len(lost)} lost, {unfinished} "
            f"unfinished; groups intact: {all(groups.values())}; slowest client back after "
            f"{back_ms[worst]:.2f} s ({worst}); runs {[run['status'] for run in runs]}",
            reconnect_s={k: round(v, 3) for k, v in back_ms.items()},
        )
        assert not lost
        assert all(groups.values()), groups
        assert max(back_ms.values()) <= RECONNECT_S, back_ms
        assert [run["status"] for run in runs] == ["success", "success"]
        hub_log = procs.log(f"hub-{url.rsplit(':', 1)[1]}")
        assert "lost its data" not in hub_log
        assert "restarting" not in hub_log, "the hub kept leading through the restart"
        api.close()
    finally:
        procs.stop()
        load.stop()
        r.close()


def _healthy(api: httpx.Client) -> bool:
    try:
        body = api.get("/healthz", timeout=1).json()
    except httpx.HTTPError:
        return False
    return bool(body.get("redis")) and bool(body.get("leader"))


def _first_after(r: redis.Redis, stream: str, t: float, name: str) -> float:
    """When a client first wrote to its stream after time `t` (a replica: the i-th one)."""
    index = int(name.rsplit("/", 1)[1]) if "/" in name else None
    seen: dict[str, float] = {}
    for entry_id, m in messages(r, stream):
        at = entry_ms(entry_id) / 1000
        if at > t:
            seen.setdefault(m["payload"].get("replica", "-"), at)
    firsts = sorted(seen.values())
    if not firsts:
        return float("inf")
    return firsts[index] if index is not None and index < len(firsts) else firsts[0]
