"""Helpers of the fault suite: direct tasks, reading streams, process memory, timing."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import httpx
import redis

from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from protocols.codec import encode, make
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType
from protocols.payloads import TaskAssign
from tests.e2e.procs import Procs

AGENT_CLASS = "tests.faults.agents:Effects"
_FIELD = STREAM_FIELD.encode()


def sync_client(server: EmbeddedServer | EmbeddedCluster) -> redis.Redis:
    """A blocking client for a test's own reads: a RedisCluster on a cluster (typed as
    Redis: the tests send one-key commands)."""
    if isinstance(server, EmbeddedCluster):
        host, port = "127.0.0.1", server.ports[0]
        return cast(redis.Redis, redis.RedisCluster(host=host, port=port))
    return redis.Redis.from_url(server.url)


def assign(agent: str, run_id: str, cue_id: str, **action: Any) -> bytes:
    """An encoded task.assign for `agent`, as the hub would put it in the agent's inbox."""
    message = make(
        MessageType.TASK_ASSIGN,
        TaskAssign(cue_id=cue_id, attempt=1, action=action),
        target_agents=(agent,),
        run_id=run_id,
        cue_id=cue_id,
    )
    return encode(message)


def spawn_agent(procs: Procs, agent: str, replica: str, cls: str = AGENT_CLASS, **env: str) -> Any:
    argv = [sys.executable, "-m", "callboard.specialist_cmd", cls, "--agent", agent]
    return procs.spawn(f"{agent}-{replica}", [*argv, "--replica", replica], **env)


def messages(client: redis.Redis, stream: str) -> list[tuple[str, dict[str, Any]]]:
    """(entry id, decoded JSON) of every entry of `stream` that holds one."""
    out = []
    for entry_id, fields in client.xrange(stream):
        raw = fields.get(_FIELD)
        if raw is not None:
            try:
                out.append((entry_id.decode(), json.loads(raw)))
            except ValueError:
                continue
    return out


def of_type(rows: list[tuple[str, dict[str, Any]]], mt: MessageType) -> list[dict[str, Any]]:
    return [m for _, m in rows if m.get("message_type") == mt.value]


def entry_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


def gos(client: redis.Redis, keys: Keys, agents: list[str], run_id: str) -> Counter[Any]:
    """(agent, cue, attempt) -> coord.go messages that reached the agent's inbox."""
    seen: Counter[Any] = Counter()
    for agent in agents:
        for m in of_type(messages(client, keys.inbox(agent)), MessageType.COORD_GO):
            if m["run_id"] == run_id:
                seen[(agent, m["cue_id"], m["payload"]["attempt"])] += 1
    return seen


def run_events(client: redis.Redis, keys: Keys, run_id: str) -> list[dict[str, Any]]:
    rows = client.xrange(keys.run_events(run_id))
    return [json.loads(fields[b"e"]) for _, fields in rows]


def dead_letters(client: redis.Redis, keys: Keys) -> list[dict[str, str]]:
    out = []
    for _, fields in client.xrange(keys.dead):
        letter = {k.decode(): v.decode(errors="replace") for k, v in fields.items() if k != b"raw"}
        letter["raw_len"] = str(len(fields.get(b"raw", b"")))
        out.append(letter)
    return out


def rss_kib(pid: int) -> int:
    """Resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def healthz_latency_ms(url: str, n: int = 30) -> float:
    """Median latency of GET /healthz over `n` calls on one connection."""
    with httpx.Client(base_url=url, timeout=5) as client:
        client.get("/healthz")
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def get_run(client: httpx.Client, run_id: str) -> dict[str, Any]:
    try:
        r = client.get(f"/v1/runs/{run_id}", timeout=2)
    except httpx.HTTPError:
        return {}
    return r.json() if r.status_code == 200 else {}  # type: ignore[no-any-return]


def submit(client: httpx.Client, cuelist: dict[str, Any]) -> None:
    r = client.post("/v1/cuelists", json=cuelist)
    assert r.status_code == 201, r.text


def start(client: httpx.Client, name: str) -> str:
    r = client.post("/v1/runs", json={"cuelist": name})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])
