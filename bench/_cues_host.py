"""Processes and keys on this host for bench/cues.py: start, stop, measure, clean up, hear
keyspace notifications (on one server or every master of a cluster); and the Celery peer
of part (d), run in a worker process the bench starts and stops."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from callboard.embedded import EmbeddedServer
from callboard.embedded_cluster import EmbeddedCluster
from protocols.transport import Redis, connect

Server = EmbeddedServer | EmbeddedCluster  # what a bench runs on

ROOT = Path(__file__).resolve().parent.parent
START_S = 30.0


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field_name: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def nodes(server: Server) -> list[EmbeddedServer]:
    """The server processes behind `server`: itself, or every master of the cluster."""
    return list(server.nodes) if isinstance(server, EmbeddedCluster) else [server]


def server_cpu_s(server: Server) -> float:
    """CPU seconds the server's processes have used so far (every master of a cluster)."""
    return sum(cpu_s(node.proc.pid) for node in nodes(server) if node.proc is not None)


async def leftover_keys(server: Server) -> int:
    """Keys on the bench's server(s) once every part cleaned up: databases 0 and 1 of one
    server (Celery's broker is 1), database 0 of every master of a cluster (it has no other)."""
    total = 0
    dbs = (0,) if isinstance(server, EmbeddedCluster) else (0, 1)
    for node in nodes(server):
        for db in dbs:
            client = connect(f"{node.url.rsplit('/', 1)[0]}/{db}")
            total += await client.dbsize()
            await client.aclose()
    return total


@contextlib.asynccontextmanager
async def keyevents(server: Server, event: str) -> AsyncIterator[asyncio.Queue[bytes]]:
    """The keys named by `event` keyspace notifications (e.g. "srem", database 0), from every
    node: a cluster node notifies only of its own keys. One reader per node fills the queue,
    so a process waiting on it sleeps until a note arrives."""
    notes: asyncio.Queue[bytes] = asyncio.Queue()
    clients = [connect(node.url) for node in nodes(server)]
    pubsubs = []
    for client in clients:
        await client.config_set("notify-keyspace-events", "Es")
        pubsub = client.pubsub()
        await pubsub.subscribe(f"__keyevent@0__:{event}")
        pubsubs.append(pubsub)

    async def read(pubsub: Any) -> None:
        async for message in pubsub.listen():
            if message["type"] == "message":
                notes.put_nowait(message["data"])

    readers = [asyncio.create_task(read(pubsub)) for pubsub in pubsubs]
    try:
        yield notes
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for pubsub, client in zip(pubsubs, clients, strict=True):
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            await client.config_set("notify-keyspace-events", "")
            await client.aclose()


async def sample_rss(pid: int, peak: list[float]) -> None:
    while True:
        with contextlib.suppress(OSError):
            peak.append(rss_mb(pid))
        await asyncio.sleep(0.02)


async def delete_prefix(client: Redis, prefix: str) -> None:
    """Delete every key under `prefix`; a cluster client scans every master and splits the
    DELs by slot."""
    batch = []
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            await client.delete(*batch)
            batch = []
    if batch:
        await client.delete(*batch)


def spawn(argv: list[str], env: dict[str, str], log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=log)


def end(proc: Any) -> None:
    """Stop one process this bench started: SIGTERM, then SIGKILL after a grace period."""
    if isinstance(proc, subprocess.Popen):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return
    if proc.is_alive():
        proc.terminate()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


async def celery_noops(server: EmbeddedServer, jobs: int, prefetch: int) -> float:
    """Celery tasks per second: `jobs` no-ops sent one by one, a solo worker holding up to
    `prefetch` messages, Redis broker (database 1 of the bench's server, flushed afterwards)."""
    from bench import _cues_celery as c

    broker = server.url.rsplit("/", 1)[0] + "/1"
    queue = f"cbbench-{uuid.uuid4().hex[:8]}"
    os.environ[c.BROKER_ENV], os.environ[c.QUEUE_ENV] = broker, queue
    c.app.conf.update(broker_url=broker, result_backend=broker, task_default_queue=queue)
    os.environ[c.PREFETCH_ENV] = str(prefetch)
    argv = [sys.executable, "-m", "celery", "-A", "bench._cues_celery", "worker",
            "--pool=solo", "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel=WARNING", "-Q", queue, "-n", f"{queue}@bench"]  # fmt: skip

    def produce() -> float:
        c.mark.apply_async().get(timeout=START_S)  # the worker is up and consuming
        t0 = time.time()
        for _ in range(jobs):
            c.noop.apply_async()
        end: float = c.mark.apply_async().get(timeout=600)
        return jobs / (end - t0)

    with tempfile.TemporaryFile() as log:
        worker = spawn(argv, dict(os.environ), log)
        try:
            return await asyncio.to_thread(produce)
        except Exception:
            log.seek(0)
            print(log.read().decode(errors="replace")[-2000:], file=sys.stderr)
            raise
        finally:
            end(worker)
            with contextlib.suppress(Exception):
                c.app.close()
            flush = connect(broker)
            await flush.flushdb()
            await flush.aclose()
