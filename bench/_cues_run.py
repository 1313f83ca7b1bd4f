"""The measurements of bench/cues.py: processes started and stopped, runs driven, figures out.

`Harness` owns every process and key prefix it creates and removes them all on exit,
whatever happened. Runs are started through the hub's command stream (what POST /v1/runs
does) and timed from the run documents the hub wrote (epoch seconds) and from the receive
times the agents stamped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._cues_host import (
    START_S,
    Server,
    cpu_s,
    delete_prefix,
    end,
    keyevents,
    rss_mb,
    sample_rss,
    server_cpu_s,
    spawn,
)
from bench._cues_procs import agents_process, hub_process, raw_agents_process
from hub.commands import CommandClient, StartRun
from hub.commands.models import Answer, Request
from hub.store import CommandStore, CuelistStore, StateStore
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import encode, make
from protocols.ids import new_id
from protocols.keys import STREAM_FIELD, Keys
from protocols.messages import MessageType as T
from protocols.process import UVLOOP_ENV
from protocols.states import RunStatus
from protocols.transport import Redis, Storage, connect
from protocols.validation import load_cuelist

WARMUP = 2  # calls measured but not counted (connections, caches, first plans)
IN_FLIGHT = 100  # start_run commands outstanding at once in (c) and (d)


@dataclass
class Row:
    name: str
    value: str
    baseline: str
    ratio: str
    target: str
    ok: bool | None


@dataclass
class Received:
    """GO receive times an agent process sent back when it stopped."""

    times: list[Any] = field(default_factory=list)
    pid: int = 0


@dataclass
class Barrier:
    """Per call, (cycle, skew) of: the bare barrier, the hub with raw protocol agents, the hub
    with SDK echo agents; and each SDK call's cycle cut into spans, alternately the hub's
    and the agents': WARNING written -> first received, -> last ack.warning written,
    -> first STANDBY received, -> last ack.standby written, -> first GO received, -> last."""

    bare: list[tuple[float, float]] = field(default_factory=list)
    raw: list[tuple[float, float]] = field(default_factory=list)
    sdk: list[tuple[float, float]] = field(default_factory=list)
    spans: list[list[float]] = field(default_factory=list)

    def add_sdk_run(self, warned_at: float | None, seen: list[tuple[str, float]], n: int) -> None:
        def times(mt: T) -> list[float]:
            return [t for m, t in seen if m == mt.value]

        gos = times(T.COORD_GO)
        self.sdk.append(_cycle(warned_at, gos, n))
        marks = [
            times(mt) for mt in (T.COORD_WARNING, T.ACK_WARNING, T.COORD_STANDBY, T.ACK_STANDBY)
        ]
        if warned_at is None or any(len(m) != n for m in marks):
            return  # a retried phase: no clean cut
        (warned, acked_w, standby, acked_s), points = marks, [warned_at]
        points += [min(warned), max(acked_w), min(standby), max(acked_s), min(gos), max(gos)]
        self.spans.append([b - a for a, b in itertools.pairwise(points)])

    def split(self) -> tuple[float, float]:
        """Median seconds of the cycle spent in the hub (and on the wire to it) and in agents."""
        hub = statistics.median(s[0] + s[2] + s[4] for s in self.spans)
        agents = statistics.median(s[1] + s[3] + s[5] for s in self.spans)
        return hub, agents


class Harness:
    def __init__(self, server: Server, profile_dir: str | None = None) -> None:
        self.server = server
        self.url = server.url
        self.profile_dir = profile_dir
        self.ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.prefixes: list[str] = []
        self.client: Redis = connect(self.url)
        self._commands: dict[str, CommandClient] = {}

    def commands(self, prefix: str) -> CommandClient:
        """The command client of a prefix: one per prefix, as an API process has one."""
        found = self._commands.get(prefix)
        if found is None:
            found = self._commands[prefix] = CommandClient(
                CommandStore(Storage(self.client), Keys(prefix))
            )
        return found

    async def __aenter__(self) -> Harness:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for commands in self._commands.values():
            await commands.store.answers.close()
        for proc in self.procs:
            end(proc)
        for prefix in self.prefixes:
            await delete_prefix(self.client, prefix)
        await self.client.aclose()

    def prefix(self) -> str:
        prefix = f"cbb{uuid.uuid4().hex[:8]}:"
        self.prefixes.append(prefix)
        return prefix

    # -- processes ------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def hub(
        self, prefix: str, early_warning: bool = True, tag: str = "hub"
    ) -> AsyncIterator[Any]:
        ready, stop = self.ctx.Event(), self.ctx.Event()
        profile = str(Path(self.profile_dir) / f"{tag}.prof") if self.profile_dir else None
        proc = self.ctx.Process(
            target=hub_process, args=(self.url, prefix, early_warning, profile, ready, stop)
        )
        proc.start()
        self.procs.append(proc)
        try:
            if not await asyncio.to_thread(ready.wait, START_S):
                raise RuntimeError("the hub did not lead in time")
            yield proc
        finally:
            stop.set()
            await asyncio.to_thread(proc.join, 30)
            end(proc)

    @contextlib.asynccontextmanager
    async def agents(
        self, prefix: str, agents: list[str], concurrency: int = 1, tag: str = "agents"
    ) -> AsyncIterator[Received]:
        """Echo specialists in one process (GO receive times stamped)."""
        ready, stop = self.ctx.Event(), self.ctx.Event()
        reader, writer = self.ctx.Pipe(duplex=False)
        profile = str(Path(self.profile_dir) / f"{tag}.prof") if self.profile_dir else None
        args = (self.url, prefix, agents, concurrency, profile, ready, stop, writer)
        async with self._child(agents_process, args, ready, stop, reader) as box:
            await self.registered(prefix, agents)
            yield box

    @contextlib.asynccontextmanager
    async def _child(
        self, target: Callable[..., None], args: tuple[Any, ...], ready: Any, stop: Any, reader: Any
    ) -> AsyncIterator[Received]:
        proc = self.ctx.Process(target=target, args=args)
        proc.start()
        self.procs.append(proc)
        box = Received(pid=proc.pid or 0)
        try:
            if not await asyncio.to_thread(ready.wait, START_S):
                raise RuntimeError(f"{target.__name__} did not start")
            yield box
        finally:
            stop.set()
            if await asyncio.to_thread(reader.poll, 60):
                box.times = reader.recv()
            await asyncio.to_thread(proc.join, 30)
            end(proc)

    @contextlib.asynccontextmanager
    async def echo(
        self, prefix: str, agent: str, concurrency: int = 1, prefetch: int | None = None
    ) -> AsyncIterator[Any]:
        """A real echo specialist process, as `callboard specialist echo` runs it."""
        env = {  # CALLBOARD_TRACING kept: bench/tracing.py turns tracing on with it
            k: v for k, v in os.environ.items()
            if not k.startswith("CALLBOARD_") or k == "CALLBOARD_TRACING"
        }  # fmt: skip
        env.update(REDIS_URL=self.url, CALLBOARD_PREFIX=prefix, CALLBOARD_LOG_LEVEL="WARNING")
        if UVLOOP_ENV in os.environ:  # the bench's --asyncio reaches the specialist too
            env[UVLOOP_ENV] = os.environ[UVLOOP_ENV]
        argv = [sys.executable, "-m", "callboard.specialist_cmd", "echo", "--agent", agent,
                "--concurrency", str(concurrency)]  # fmt: skip
        if prefetch is not None:
            argv += ["--prefetch", str(prefetch)]
        if self.profile_dir:
            profile = str(Path(self.profile_dir) / f"echo-{prefix.rstrip(':')}.prof")
            argv[1:1] = ["-m", "cProfile", "-o", profile]
        with tempfile.TemporaryFile() as log:
            proc = spawn(argv, env, log)
            self.procs.append(proc)
            try:
                await self.registered(prefix, [agent], proc)
                yield proc
            finally:
                end(proc)
                if proc.returncode not in (0, -signal.SIGTERM):
                    log.seek(0)
                    print(log.read().decode(errors="replace")[-2000:], file=sys.stderr)

    async def registered(self, prefix: str, agents: list[str], proc: Any = None) -> None:
        """Wait until the hub's registry has every agent online (its out stream is read)."""
        key = Keys(prefix).agents
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"specialist exited with {proc.returncode}")
            raw: dict[bytes, bytes] = await self.client.hgetall(key)  # type: ignore[assignment]
            online = {
                k.decode()
                for k, v in raw.items()
                if any(r.get("online") for r in json.loads(v)["replicas"].values())
            }
            if online >= set(agents):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"agents not online in time: {sorted(set(agents) - online)}")

    # -- runs -----------------------------------------------------------------------------
    async def put(self, prefix: str, data: dict[str, Any]) -> tuple[str, str]:
        cuelist, version = load_cuelist(data)
        await CuelistStore(Storage(self.client), Keys(prefix)).put(
            cuelist, version, canonical_json(cuelist), None
        )
        return cuelist.cuelist, version

    async def start(self, prefix: str, name: str, version: str, run_id: str) -> None:
        commands = self.commands(prefix)
        command = _start(name, version, run_id)
        await commands.answer(command, await commands.send(command))

    @contextlib.asynccontextmanager
    async def run_ends(self) -> AsyncIterator[asyncio.Queue[bytes]]:
        """Keyspace notifications of SREM on the bench's own server (every master of a
        cluster): a run leaving a prefix's active set. Waiting on those instead of on the
        run's event stream keeps the bench's process asleep while a call is timed, as the
        bare barrier has no observer."""
        async with keyevents(self.server, "srem") as notes:
            yield notes

    async def start_quietly(
        self, prefix: str, name: str, version: str, run_id: str, ended: asyncio.Queue[bytes]
    ) -> None:
        """Start a run and return once it ended, without waking in between: the start
        command names no asker, so its answer waits on a list of its own, read after the
        run left the active set (`run_ends`), where an API process's answer reader would
        wake for it mid-call."""
        keys = Keys(prefix)
        command = _start(name, version, run_id)
        request = Request(command=command)
        await self.commands(prefix).store.push(request.model_dump_json().encode())
        deadline, key = time.monotonic() + 60.0, keys.active_runs().encode()
        while True:
            try:
                note: bytes | None = await asyncio.wait_for(ended.get(), 1.0)
            except TimeoutError:
                note = None
            if (note is None or note == key) and await self._ended(keys, run_id):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not end in 60s")
        raw = await Storage(self.client).blpop(keys.reply(request.id), 10.0)
        answer = Answer.model_validate_json(raw or b'{"ok": false, "detail": "no answer"}')
        if not answer.ok:
            raise RuntimeError(f"start of {run_id} refused: {answer.detail}")

    async def _ended(self, keys: Keys, run_id: str) -> bool:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(keys.run(run_id))
            pipe.sismember(keys.active_runs(), run_id)
            there, active = await pipe.execute()
        return bool(there) and not active

    async def start_many(self, prefix: str, name: str, version: str, run_ids: list[str]) -> None:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(run_id: str) -> None:
            async with gate:
                await self.start(prefix, name, version, run_id)

        await asyncio.gather(*(one(r) for r in run_ids))

    async def wait_run(self, prefix: str, run_id: str, timeout_s: float = 60.0) -> None:
        """Block on the run's event stream until it reports a final status."""
        stream, last = Keys(prefix).run_events(run_id), "0-0"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reply: Any = await self.client.xread({stream: last}, count=100, block=1000)
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    last = entry_id
                    status = json.loads(fields[b"e"]).get("status")
                    if status is not None and RunStatus(status).done:
                        return
        raise TimeoutError(f"run {run_id} did not finish in {timeout_s:g}s")

    async def wait_idle(self, prefix: str, timeout_s: float) -> None:
        """Until no run is active (every run started has finished)."""
        key = Keys(prefix).active_runs()
        deadline = time.monotonic() + timeout_s
        while await self.client.scard(key):
            if time.monotonic() > deadline:
                raise TimeoutError(f"runs still active after {timeout_s:g}s")
            await asyncio.sleep(0.01)

    async def finished(self, prefix: str, run_ids: list[str], settle_s: float = 10.0) -> list[Any]:
        """The runs' final states, every one a success. On a cluster a step's slots are
        applied by separate scripts (hub/store/journal.py): a run may leave the active set
        (the partition's slot) a moment before its own slot says it is done, so a run not
        done yet is read again (for up to `settle_s`)."""
        store = StateStore(Storage(self.client), Keys(prefix))
        deadline = time.monotonic() + settle_s
        while True:
            runs = await store.runs(run_ids)
            settled = len(runs) == len(run_ids) and all(r.status.done for r in runs)
            if settled or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        bad = [r.status.value for r in runs if r.status is not RunStatus.SUCCESS]
        if len(runs) != len(run_ids) or bad:
            raise RuntimeError(f"{len(runs)}/{len(run_ids)} runs found; not success: {bad[:5]}")
        return runs

    # -- (a) the bare barrier and the cue call, interleaved ---------------------------------
    async def barrier(
        self, n: int, repeats: int, cuelist: Callable[[str, list[str]], dict[str, Any]]
    ) -> Barrier:
        """`repeats` calls with n agents, round-robin: a bare barrier call, a hub run with raw
        protocol agents (the same agent code as the bare one), a hub run with SDK echo
        agents. Interleaved so all three see the same (shared) machine at the same moments."""
        agents = [f"a{i:02d}" for i in range(n)]
        bare, raw, sdk = self.prefix(), self.prefix(), self.prefix()
        acks = f"{bare}bare:acks"  # the baseline's own key, not callboard's
        inboxes = [Keys(bare).inbox(a) for a in agents]
        raw_ids, sdk_ids = ([new_id() for _ in range(WARMUP + repeats)] for _ in range(2))
        sent: dict[str, float] = {}
        async with (
            self.raw_agents(bare, agents, acks) as bare_seen,
            self.hub(raw, tag=f"a{n}-raw"),
            self.raw_agents(raw, agents) as raw_seen,
            self.hub(sdk, tag=f"a{n}-sdk"),
            self.agents(sdk, agents, tag=f"a{n}-sdk-agents") as sdk_seen,
        ):
            calls = [(prefix, *await self.put(prefix, cuelist(f"call-{n}", agents)))
                     for prefix in (raw, sdk)]  # fmt: skip
            last = "0-0"
            async with self.run_ends() as ended:
                for k in range(WARMUP + repeats):
                    sent[f"C{k}"], last = await self._bare_call(
                        f"C{k}", agents, inboxes, acks, last
                    )
                    for (prefix, name, version), run_id in zip(
                        calls, (raw_ids[k], sdk_ids[k]), strict=True
                    ):
                        await self.start_quietly(prefix, name, version, run_id, ended)
            raw_runs = await self.finished(raw, raw_ids)
            sdk_runs = await self.finished(sdk, sdk_ids)
        result = Barrier()
        for k in range(WARMUP, WARMUP + repeats):
            gos = [t for _, c, _, t in bare_seen.times if c == f"C{k}"]
            result.bare.append(_cycle(sent[f"C{k}"], gos, n))
        for run in raw_runs[WARMUP:]:
            gos = [t for r, _, _, t in raw_seen.times if r == run.run_id]
            result.raw.append(_cycle(run.cues["CALL"].warned_at, gos, n))
        for run in sdk_runs[WARMUP:]:
            seen = [(mt, t) for r, mt, _, t in sdk_seen.times if r == run.run_id]
            result.add_sdk_run(run.cues["CALL"].warned_at, seen, n)
        return result

    @contextlib.asynccontextmanager
    async def raw_agents(
        self, prefix: str, agents: list[str], shared: str | None = None
    ) -> AsyncIterator[Received]:
        ready, stop = self.ctx.Event(), self.ctx.Event()
        reader, writer = self.ctx.Pipe(duplex=False)
        args = (self.url, prefix, agents, shared, ready, stop, writer)
        async with self._child(raw_agents_process, args, ready, stop, reader) as box:
            if shared is None:
                await self.registered(prefix, agents)
            yield box

    async def _bare_call(
        self, cue: str, agents: list[str], inboxes: list[str], acks: str, last: str
    ) -> tuple[float, str]:
        """Warning, standby, GO: each XADDed to every inbox in one pipeline, then n answers."""
        phases = _phase_messages(cue, agents)
        sent = time.time()
        for data in phases:
            async with self.client.pipeline(transaction=False) as pipe:
                for inbox in inboxes:
                    pipe.xadd(inbox, {STREAM_FIELD: data})
                await pipe.execute()
            last = await self._answers(acks, last, len(agents))
        return sent, last

    async def _answers(self, stream: str, last: str, n: int) -> str:
        got = 0
        while got < n:
            reply: Any = await self.client.xread({stream: last}, count=1000, block=5000)
            if not reply:
                raise TimeoutError("bare agents stopped answering")
            entries = reply[0][1]
            got += len(entries)
            last = entries[-1][0]
        return last

    # -- (b) ------------------------------------------------------------------------------
    async def chain(
        self, n: int, shapes: list[tuple[int, int]], early_warning: bool,
        cuelist: Callable[..., dict[str, Any]], tag: str | None = None,
    ) -> list[float]:  # fmt: skip
        """Seconds from run start to completion of an n-cue chain, per (prepare, execute).
        The run is started and awaited quietly (`start_quietly`), as the calls in (a) are:
        following its event stream woke this process a few times a cue, on the two cores
        the hub, the echo and Redis share."""
        prefix = self.prefix()
        out = []
        tag = tag or f"b-{'early' if early_warning else 'late'}"
        async with (
            self.hub(prefix, early_warning, tag=tag),
            self.echo(prefix, "chain"),
            self.run_ends() as ended,
        ):
            for prepare_ms, execute_ms in shapes:
                name, version = await self.put(
                    prefix,
                    cuelist(f"chain-{prepare_ms}-{execute_ms}", "chain", n, prepare_ms, execute_ms),
                )
                run_id = new_id()
                await self.start_quietly(prefix, name, version, run_id, ended)
                (run,) = await self.finished(prefix, [run_id])
                out.append(run.completed_at - run.started_at)
        return out

    # -- (c) ------------------------------------------------------------------------------
    async def many_runs(
        self, count: int, cuelist: Callable[[str], dict[str, Any]], raw: bool
    ) -> dict[str, float]:
        """`count` runs started at once on five agents (SDK echo, or raw protocol agents):
        runs/s from the first start to the last completion, the hub's RSS and CPU."""
        prefix = self.prefix()
        agents = ["w1", "w2", "w3", "w4", "w5"]
        workers = self.raw_agents(prefix, agents) if raw else self.agents(prefix, agents, count)
        async with self.hub(prefix, tag="c-raw" if raw else "c") as hub, workers as box:
            name, version = await self.put(prefix, cuelist("five"))
            warm = new_id()
            await self.start(prefix, name, version, warm)
            await self.wait_run(prefix, warm)
            idle = rss_mb(hub.pid)
            peak = [idle]
            sampling = asyncio.create_task(sample_rss(hub.pid, peak))
            run_ids = [new_id() for _ in range(count)]
            cpu0 = (cpu_s(hub.pid), cpu_s(box.pid), time.monotonic())
            client0 = cpu_s(os.getpid())  # this process sends the start commands
            redis0 = server_cpu_s(self.server)
            t0 = time.time()
            await self.start_many(prefix, name, version, run_ids)
            await self.wait_idle(prefix, 300)
            wall = time.monotonic() - cpu0[2]
            client_cpu = cpu_s(os.getpid()) - client0
            redis_cpu = server_cpu_s(self.server) - redis0
            hub_cpu, agents_cpu = cpu_s(hub.pid) - cpu0[0], cpu_s(box.pid) - cpu0[1]
            sampling.cancel()
            peak.append(rss_mb(hub.pid, "VmHWM"))
            runs = await self.finished(prefix, run_ids)
        end = max(r.completed_at for r in runs)
        return {
            "runs_per_s": count / (end - t0),
            "latency_p50_s": statistics.median(r.completed_at - r.created_at for r in runs),
            "rss_idle_mb": idle,
            "rss_peak_mb": max(peak),
            "hub_cpu": hub_cpu / wall,
            "agents_cpu": agents_cpu / wall,
            "hub_us": hub_cpu / count * 1e6,
            "agents_us": agents_cpu / count * 1e6,
            "client_us": client_cpu / count * 1e6,
            "redis_us": redis_cpu / count * 1e6,
        }

    # -- (d) ------------------------------------------------------------------------------
    async def direct_cues(
        self, jobs: int, concurrency: int, cuelist: Callable[[str, str, int], dict[str, Any]],
        one_run: bool, prefetch: int,
    ) -> list[dict[str, float]]:  # fmt: skip
        """Direct cues per second through one echo process, from the first start to the last
        completion: `jobs` runs of a one-cue cuelist; or one run of `jobs` entry cues, twice:
        a new cuelist version (the hub compiles its plan first), then the same version."""
        prefix = self.prefix()
        async with self.hub(prefix, tag=f"d{concurrency}{'-one' if one_run else ''}") as hub, \
                self.echo(prefix, "worker", concurrency, prefetch) as echo:  # fmt: skip
            warm_name, warm_version = await self.put(prefix, cuelist("direct", "worker", 1))
            warm = new_id()
            await self.start(prefix, warm_name, warm_version, warm)
            await self.wait_run(prefix, warm)
            if not one_run:
                run_ids = [new_id() for _ in range(jobs)]
                return [await self._direct(prefix, warm_name, warm_version, run_ids, hub, echo)]
            name, version = await self.put(prefix, cuelist("direct-many", "worker", jobs))
            return [
                await self._direct(prefix, name, version, [new_id()], hub, echo, jobs)
                for _ in range(2)
            ]

    async def _direct(
        self, prefix: str, name: str, version: str, run_ids: list[str], hub: Any, echo: Any,
        cues_per_run: int = 1,
    ) -> dict[str, float]:  # fmt: skip
        jobs = len(run_ids) * cues_per_run
        cpu0 = (cpu_s(hub.pid), cpu_s(echo.pid), time.monotonic(), server_cpu_s(self.server))
        client0 = cpu_s(os.getpid())  # this process sends the start commands
        t0 = time.time()
        await self.start_many(prefix, name, version, run_ids)
        await self.wait_idle(prefix, 600)
        wall = time.monotonic() - cpu0[2]
        hub_cpu, echo_cpu = cpu_s(hub.pid) - cpu0[0], cpu_s(echo.pid) - cpu0[1]
        redis_cpu = server_cpu_s(self.server) - cpu0[3]
        client_cpu = cpu_s(os.getpid()) - client0
        runs = await self.finished(prefix, run_ids)
        cues = [cr for r in runs for cr in r.cues.values()]
        return {
            "per_s": jobs / (max(r.completed_at for r in runs) - t0),
            "first_go_s": min(g["at"] for cr in cues for g in cr.gos) - t0,
            "first_done_s": min(cr.completed_at for cr in cues) - t0,
            "hub_cpu_us": hub_cpu / jobs * 1e6, "echo_cpu_us": echo_cpu / jobs * 1e6,
            "hub_busy": hub_cpu / wall, "echo_busy": echo_cpu / wall,
            "redis_cpu_us": redis_cpu / jobs * 1e6, "redis_busy": redis_cpu / wall,
            "client_cpu_us": client_cpu / jobs * 1e6,
        }  # fmt: skip


# -- helpers ----------------------------------------------------------------------------------


def _start(name: str, version: str, run_id: str) -> StartRun:
    """The start command POST /v1/runs sends (what `callboard run` does)."""
    return StartRun(cuelist=name, version=version, run_id=run_id, params={}, dry=False)


def _phase_messages(cue: str, agents: list[str]) -> list[bytes]:
    action = {"prepare_ms": 0, "execute_ms": 0}
    fields: dict[str, Any] = {"target_agents": tuple(agents), "cue_id": cue, "run_id": "bare"}
    phases = [
        (T.COORD_WARNING, p.CoordWarning(cue_id=cue, target_agents=agents, action=action)),
        (T.COORD_STANDBY, p.CoordStandby(cue_id=cue, target_agents=agents)),
        (T.COORD_GO, p.CoordGo(cue_id=cue, target_agents=agents, action=action)),
    ]
    return [encode(make(mt, payload, **fields)) for mt, payload in phases]


def _cycle(sent: float | None, gos: list[float], n: int) -> tuple[float, float]:
    if sent is None or len(gos) != n:
        raise RuntimeError(f"{len(gos)} of {n} targets saw their GO")
    return max(gos) - sent, max(gos) - min(gos)
