"""The engine's I/O on the leading hub: load state, apply inputs, commit, run deadlines.

Each step mutates the engine under one lock, takes its outbox and commits it in one fenced
write before anything is acknowledged, so a hub killed at any point resumes from Redis
with no GO sent twice and no message lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from hub.engine import inputs
from hub.engine.base import CHUNK
from hub.engine.core import Engine
from hub.engine.dry import dry_run
from hub.engine.escalations import OPEN
from hub.engine.outbox import Outbox, Timer
from hub.engine.plan import Plan
from hub.engine.state import RunState
from hub.store.cuelists import CuelistStore
from hub.store.state import LOAD_CHUNK, StateStore
from protocols.contracts import Contract
from protocols.errors import CallboardError, NotFound, StaleLeader
from protocols.keys import Keys
from protocols.recent import Recent
from protocols.targeting import Candidate

if TYPE_CHECKING:  # imported only when tracing is on (hub.service)
    from hub.tracing import HubTracer

log = logging.getLogger(__name__)
LOST_REASON = "Redis lost its data: the run's state was gone when the hub resumed"
GONE_REASON = "its cuelist version was deleted while it ran: the hub cannot go on with it"
PLANS_KEPT = 64  # the plans of this many versions are kept built (see `plan`)
BACKLOG_CHUNK = CHUNK  # cues a step evaluates of the backlog (see hub.engine.base.CHUNK)
DRY_EVENTS_PER_WRITE = 2_000  # a dry run's events, written after it this many at a time
LINGER_S = 0.002  # how long a step that sends nothing may wait to share the next write
# A timers' wait that ends this much later than it should have: the process stalled (frozen,
# starved), and the deadlines wait for the router to read what came meanwhile
STALL_S = 0.25
# The least time between two re-checks of the cues waiting for an agent: a burst of registry
# changes (an agent changing its contract on every batch, a fleet coming online) makes one
# re-check at once and one more with the newest agents RECHECK_S later, not one per batch.
RECHECK_S = 0.1
# The newest escalations a term loads (the operator queue's); an older one that holds a
# dedup slot (a running run's, or one of no run still open) is read by its id besides.
ESCALATIONS_LOADED = 1_000
# Timers outlive their runs (a budget's wall_s a week away; a deadline after a cancel) and
# fire as nothing: past this many held, those of runs no longer running are swept out, once
# a minute at most (the run adopted again makes its own again)
TIMERS_SWEPT_PAST = 4_096
TIMERS_SWEEP_EVERY_S = 60.0
R = TypeVar("R")


class Driver:
    def __init__(
        self,
        store: StateStore,
        cuelists: CuelistStore,
        keys: Keys,
        lease_value: Callable[[], str | None],
        contract_of: Callable[[str], Contract | None] = lambda agent: None,
        on_commit: Callable[[Outbox], None] | None = None,
        early_warning: bool = True,
        online: Callable[[], Mapping[str, Candidate]] = dict,
        tracer: HubTracer | None = None,
    ) -> None:
        self.store = store
        self.tracer = tracer  # spans around each commit (hub.tracing); None: tracing off
        self.cuelists = cuelists
        self.keys = keys
        self.lease_value = lease_value
        self.early_warning = early_warning
        self.online = online  # the registry's online agents (targets by capability)
        self.engine = Engine(keys, contract_of=contract_of)
        self.engine.early_warning = early_warning
        self.on_commit = on_commit
        self._lock = asyncio.Lock()  # engine mutations (synchronous) and taking the outbox
        self._commit_lock = asyncio.Lock()  # one fenced write at a time, in order
        self._applied = 0  # steps applied to the engine
        self._durable = 0  # steps covered by a finished commit
        self._timers: list[Timer] = []
        self._timers_swept = 0.0  # when (monotonic) `_sweep_timers` last ran
        self._wake = asyncio.Event()
        self._backlog = asyncio.Event()
        self._linger: asyncio.Task[None] | None = None
        self._quiet_since: float | None = None  # the oldest quiet step no write has taken
        self._linger_failed: BaseException | None = None
        self._behind: asyncio.Task[None] | None = None  # a `behind` step's write in flight
        # plans built lately (a run holds its own in the engine; these spare a rebuild)
        self._plans: Recent[tuple[str, str], Plan] = Recent(PLANS_KEPT)
        self._rechecked = float("-inf")  # when cues waiting for an agent were last re-checked
        self._agents: Mapping[str, Candidate] = {}  # the newest online agents not yet seen
        self._recheck: asyncio.Task[None] | None = None  # the re-check waiting its turn
        # A write that failed leaves the engine ahead of Redis: no later step may build on
        # it. `broken` ends the leader's term; the next term reloads from Redis.
        self.failed: BaseException | None = None
        self.broken = asyncio.Event()
        # A write refused for a lost lease (StaleLeader) ends the term too, at once: a
        # quiet step's lingering write is refused with no caller to hear it.
        self.stale = asyncio.Event()
        # runs made by steps whose write failed: never in Redis (unless the write landed
        # with its answer lost), so not runs whose state is gone (`_fail_lost`)
        self._unwritten: set[str] = set()

    @property
    def applied(self) -> int:
        """How many steps the engine has applied (the last step's number)."""
        return self._applied

    @property
    def durable(self) -> int:
        """How many steps a finished write covers: step `n` is in Redis once this >= n."""
        return self._durable

    # -- state ----------------------------------------------------------------------------
    async def load(self) -> int:
        """Resume every active run from Redis (after a restart or a leader change)."""
        async with self._commit_lock, self._lock:
            lease = self.lease_value()
            if lease is not None:  # a cluster's journaled steps land before any is read
                await self.store.replay(lease)
            if self._linger is not None:  # what it would have written is read back instead
                self._linger.cancel()
            if self._recheck is not None:  # the agents are read below, as the term starts
                self._recheck.cancel()
                self._recheck = None
            self._linger_failed, self._quiet_since = None, None
            self._behind = None  # landed (the commit lock is held) or failed: read back below
            self.failed = None
            self.broken.clear()
            self.stale.clear()
            if self.tracer is not None:
                self.tracer.reset()
            previous = self.engine
            self.engine = Engine(self.keys, contract_of=self.engine.contract_of)
            self.engine.early_warning = self.early_warning
            book = await self.store.resources()
            if book is not None:
                self.engine.book = book
            self.engine.paused = await self.store.paused()
            found = await self.store.runs_and_escalations(await self.store.active_run_ids())
            runs = [run for run, _ in found]
            orphans = []
            for i, run in enumerate(runs):
                if i % LOAD_CHUNK == LOAD_CHUNK - 1:
                    await asyncio.sleep(0)  # the loop's other work (the lease's) runs between
                try:
                    plan = await self.plan(run.cuelist, run.version)
                except NotFound:
                    # deleted in a race with a start or a retry (a delete keeps the versions
                    # active runs use): raised here, it ended every term of every hub
                    log.error("run %s: %s", run.run_id, GONE_REASON)
                    called = {c: [*cr.targets] for c, cr in run.cues.items()}
                    plan = Plan.stand_in(run.cuelist, run.version, called)
                    orphans.append(run)
                self.engine.adopt(run, plan)
            for run in orphans:
                self._end(run, GONE_REASON)
            self._release_orphans()
            self.engine.agents_online(self.online())  # cues waiting for an agent re-check
            # the record's first escalations too: a run written before its hash named them
            named = {i for run, ids in found for i in [*ids, *run.record.escalations]}
            await self._load_escalations(named)
            await self._fail_lost(previous)
            await self._commit(self.engine.take())
            return len(runs)

    async def _load_escalations(self, of_runs: set[str]) -> None:
        """The escalations holding a dedup slot: the newest ESCALATIONS_LOADED, then the
        older ones the runs' hashes name (`of_runs`) or the open set of no run names, so
        a cause raised again counts on its escalation, not a second one."""
        newest = await self.store.escalations(limit=ESCALATIONS_LOADED)
        older = of_runs | await self.store.open_escalation_ids()
        older -= {esc.id for esc in newest}
        for esc in [*newest, *await self.store.escalations_named(sorted(older))]:
            if esc.run_id in self.engine.runs or (esc.run_id is None and esc.status == OPEN):
                self.engine.escalations.take_in(esc)

    def _release_orphans(self) -> None:
        """Leases die with the hub that held them: a claim whose run is no longer being run
        (it ended, or its state is gone) is dropped, and waiters behind it move up."""
        book = self.engine.book
        holders = {c.run_id for c in book.held.values()} | {h[0] for h in book.waiting}
        for run_id in sorted(holders - set(self.engine.runs)):
            log.warning("releasing resources held for run %s, which is not running", run_id)
            self.engine.retry_waiters(book.forget_run(run_id))
            self.engine.out.resources_changed = True

    async def _fail_lost(self, previous: Engine) -> None:
        """Runs this hub was running whose state Redis no longer has (it came back empty,
        taking the leader lease along): fail them with that reason instead of forgetting.
        Not a run whose first write never landed (the term ended before it, or refused it):
        it was never in Redis, and the command that made it, served again, makes it again.
        Failed as lost, it ended a run its operator had only just started."""
        unwritten, self._unwritten = self._unwritten | previous.out.started, set()
        gone = await self.store.missing_runs(
            [r for r in previous.runs if r not in self.engine.runs and r not in unwritten]
        )
        for run_id in gone:
            run = previous.runs[run_id]
            log.error("run %s: its state is gone from Redis; failing it", run_id)
            self.engine.adopt(run, previous.plans[run_id])
            self._end(run, LOST_REASON)

    def _end(self, run: RunState, reason: str) -> None:
        """End an adopted run the hub cannot go on with: its cues not done fail, saying why
        (one failed in memory already, its write refused, is written as it is)."""
        if run.status.done:
            self.engine.out.finished.add(run.run_id)
        else:
            self.engine.abort(run.run_id, reason)

    def discard(self) -> None:
        """Forget the engine's state (a write failed, so it is not what Redis holds): the
        next load reads everything back, and fails no run for being missing from Redis."""
        self.engine = Engine(self.keys, contract_of=self.engine.contract_of)
        self.engine.early_warning = self.early_warning
        self._timers.clear()

    async def plan(self, name: str, version: str) -> Plan:
        key = (name, version)
        found = self._plans.get(key)
        if found is None:  # a run of that version holds its plan still, or it is built
            held = (p for p in self.engine.plans.values()
                    if p.version == version and not p.stand_in_for_gone)  # fmt: skip
            found = next((p for p in held if p.cuelist.cuelist == name), None)
            if found is None:
                cuelist = await self.cuelists.get(name, version)
                # pure, and long for a big cuelist: off the event loop
                found = await asyncio.to_thread(Plan.build, cuelist, version)
            self._plans.put(key, found)
        return found

    async def step(
        self, fn: Callable[[Engine], R], quiet_may_wait: bool = False, behind: bool = False
    ) -> R:
        """Run `fn` on the engine; return once what it produced is committed.

        Group commit: steps that arrive while a write is in flight are committed together
        by the next one, so concurrent inputs (router batches, operator commands, timers)
        share fenced writes instead of queueing one round trip each.

        With `quiet_may_wait` (the router's steps: their XACKs ride in the write), a step
        that sends nothing and sets no deadline (an ack that leaves its cue waiting for
        others) returns at once and is written with the next step, or after LINGER_S:
        the rest of a phase's acks then go in one write instead of one write each.

        With `behind` (the router's steps again) a step returns once the write before it
        has landed and its own has started: its caller reads and handles the next input
        while Redis runs this one's write. One write at most is left behind; its failure
        ends the term (`broken`, `stale`) and is raised by the next `caught_up`.
        """
        if self._linger_failed is not None:  # a quiet step's write failed: say so now
            lingered, self._linger_failed = self._linger_failed, None
            raise lingered
        if self.failed is not None:
            raise StaleLeader(f"a state write failed ({self.failed}): this term is over")
        failure: BaseException | None = None
        async with self._lock:
            try:
                result = fn(self.engine)
            except CallboardError as exc:  # a refusal: its partial effects are committed
                failure = exc
            except Exception as exc:
                # A bug mid-step: what it changed (the XACKs of a batch it did not finish
                # among them) is not to be trusted. Nothing more is written; the term ends
                # and the next one reloads and handles the input again.
                self.failed = exc
                self.broken.set()
                raise
            self._applied += 1
            mine = self._applied
            wait = quiet_may_wait and failure is None and self.engine.out.quiet()
        if wait:
            if self._quiet_since is None:
                self._quiet_since = time.monotonic()
            if self._linger is None or self._linger.done():
                self._linger = asyncio.create_task(self._linger_then_flush())
            return result
        if behind and failure is None:
            await self.caught_up()
            self._behind = asyncio.create_task(self._flush(mine), name="write-behind")
            self._behind.add_done_callback(_heard)  # raised by `caught_up`, or ends the term
            # One turn of the loop: the write's own code runs until it waits on Redis, so it
            # is sent before the caller's next read is built. Otherwise the read's work came
            # first and held a phase's next messages back by 0.1-0.2 ms (bench/cues.py (a)).
            await asyncio.sleep(0)
            return result
        # Steps made ready beside this one (a batch of commands served at once) are applied
        # before its write starts, and go in it: one write a batch, not one for the first
        # step and another for the rest.
        await asyncio.sleep(0)
        await self._flush(mine)
        if failure is not None:
            raise failure
        return result

    async def caught_up(self) -> None:
        """Return once the write a `behind` step left has landed (raise if it failed). A
        caller cancelled meanwhile leaves the write to go on: it is never cut short."""
        behind, self._behind = self._behind, None
        if behind is not None:
            await asyncio.shield(behind)

    async def _linger_then_flush(self) -> None:
        """Write what quiet steps left, LINGER_S after the oldest of them, until nothing is
        left. A write that took them meanwhile (the step that completed the phase) ends the
        wait, so a stale timer never fires into the next phase; a quiet step that lands
        while this write is in flight finds this task still running and counts on it."""
        try:
            while self._quiet_since is not None:
                wait_s = self._quiet_since + LINGER_S - time.monotonic()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                    continue
                await self._flush(self._applied)
        except Exception as exc:  # surfaces in the next step (StaleLeader, Redis down)
            self._linger_failed = exc

    async def _flush(self, upto: int) -> None:
        async with self._commit_lock:
            if self._durable >= upto:
                if upto == self._applied:  # every step is written: no quiet one waits
                    self._quiet_since = None
                return  # a write that started after this step already carried it
            if self.failed is not None:
                raise StaleLeader(f"a state write failed ({self.failed}): this term is over")
            covered = self._applied
            self._quiet_since = None  # every quiet step so far is in this write
            await self._commit(self.engine.take())  # serialised before its first await
            self._durable = covered

    async def _commit(self, out: Outbox) -> None:
        lease = self.lease_value()
        if lease is None:
            self.stale.set()
            raise StaleLeader("not the leader")
        tracer = self.tracer
        if tracer is not None:
            tracer.stamp(out, self.engine)  # each message's traceparent; the send spans
        try:
            await self.store.commit(out, self.engine, lease)
        except StaleLeader as exc:
            self.stale.set()
            self._unwritten |= out.started
            if tracer is not None:
                tracer.failed(exc)
            raise
        except Exception as exc:
            self.failed = exc
            self.broken.set()
            self._unwritten |= out.started
            if tracer is not None:
                tracer.failed(exc)
            raise
        except asyncio.CancelledError:  # the term ended with the write on its way
            self._unwritten |= out.started
            raise
        if tracer is not None:
            tracer.committed(out, self.engine)
        for timer in out.timers:
            heapq.heappush(self._timers, timer)
        if out.timers:
            self._wake.set()
        if len(self._timers) > TIMERS_SWEPT_PAST and (out.timers or out.finished):
            self._sweep_timers()
        if self.engine.backlog:
            self._backlog.set()
        if self.on_commit is not None:
            self.on_commit(out)
        for run_id in out.finished:
            self.engine.forget(run_id)

    # -- inputs ---------------------------------------------------------------------------
    async def start_run(
        self, name: str, version: str | None, run_id: str, params: dict[str, Any], dry: bool,
        write: Sequence[list[Any]] = (), budget: dict[str, Any] | None = None,
    ) -> RunState:  # fmt: skip
        """Start a run; `write` (raw one-key commands) lands in the same fenced write."""
        version = version or await self.cuelists.latest(name)
        if version is None:
            raise NotFound(f"no cuelist named {name}")
        plan = await self.plan(name, version)
        if dry:
            # The walk is pure (an engine of its own on an immutable plan): a thread keeps a
            # 10,000-cue walk from holding the event loop, and so the lease, for its length.
            run, out = await asyncio.to_thread(
                dry_run, plan, run_id, params, self.keys, self.online()
            )
            out.raw.extend(write)
            # The walk's events (a few per cue) follow the run in writes of their own, at
            # most DRY_EVENTS_PER_WRITE each: one write of a 10,000-cue walk's 30,000 events
            # held the event loop for half a second building and sending it (fault row 21).
            # A dry run is a record: a hub that stops meanwhile leaves its timeline short.
            events, out.events = out.events, out.events[:DRY_EVENTS_PER_WRITE]
            async with self._commit_lock, self._lock:
                # the commit reads the run from the engine: there with its plan, then gone
                self.engine.runs[run_id], self.engine.plans[run_id] = run, plan
                try:
                    await self._commit(out)
                    for at in range(DRY_EVENTS_PER_WRITE, len(events), DRY_EVENTS_PER_WRITE):
                        await self._commit(Outbox(events=events[at : at + DRY_EVENTS_PER_WRITE]))
                finally:
                    self.engine.runs.pop(run_id, None)
                    self.engine.plans.pop(run_id, None)
            return run

        def start(e: Engine) -> RunState:
            if (started := e.runs.get(run_id)) is not None:
                return started  # the same start, served twice at once: started once
            run = e.start_run(plan, run_id, params, dry=False, chunk=BACKLOG_CHUNK, budget=budget)
            e.write_with_step(list(write))  # after: a refused start writes none of it
            return run

        return await self.step(start)

    async def agents_changed(self, agents: Mapping[str, Candidate]) -> None:
        """The online agents changed: cues waiting for a matching agent may fire now, or,
        within RECHECK_S of the last re-check, once that has passed, with the agents then
        newest (each re-check looks at every waiting cue: 8 ms at 1,000 waiting runs)."""
        self._agents = agents
        if self._recheck is not None:
            return  # the re-check waiting its turn takes these agents
        wait = self._rechecked + RECHECK_S - time.monotonic()
        if wait <= 0:
            await self._recheck_now()
        else:
            self._recheck = asyncio.create_task(self._recheck_after(wait), name="recheck")

    async def _recheck_now(self) -> None:
        self._rechecked = time.monotonic()
        await self.step(partial(_agents_online, agents=self._agents))

    async def _recheck_after(self, wait_s: float) -> None:
        await asyncio.sleep(wait_s)  # the re-check's turn (RECHECK_S), not a wait for anything
        self._recheck = None
        if self.lease_value() is None:
            return  # the term ended: the next one reads the agents as it starts
        try:
            await self._recheck_now()
        except CallboardError as exc:  # the failed write ends the term (`broken`, `stale`)
            log.warning("re-checking the cues waiting for an agent: %s", exc)

    async def run_backlog(self, stop: asyncio.Event) -> None:
        """Evaluate the cues of starting runs, a chunk per step, between other steps."""
        while not stop.is_set():
            if self.engine.backlog:
                await self.step(lambda e: e.work_backlog(BACKLOG_CHUNK))
                continue
            self._backlog.clear()
            if self.engine.backlog:  # queued between the check and the clear
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._backlog.wait(), 1.0)

    def _sweep_timers(self) -> None:
        """Drop the timers of runs the engine no longer runs, and copies (a budget changed
        again sets the same wall_s timers): they would fire as nothing. Once every
        TIMERS_SWEEP_EVERY_S at most: a pass over them all."""
        if time.monotonic() - self._timers_swept < TIMERS_SWEEP_EVERY_S:
            return
        self._timers_swept = time.monotonic()
        runs = self.engine.runs
        kept = list(dict.fromkeys(
            t for t in self._timers
            if (run := runs.get(t.run_id)) is not None and not run.status.done
        ))  # fmt: skip
        heapq.heapify(kept)
        self._timers = kept

    async def run_timers(
        self, stop: asyncio.Event, handled: Callable[[float], Awaitable[None]] | None = None
    ) -> None:
        """Fire deadlines when due; rebuilt from run state after a restart. `handled(now)`
        (the router's `handled_through`) returns once the replies that reached the streams
        before `now` are handled: asked before the term's first deadlines fire, and after
        this task woke late (the process stalled). Replies an agent sent in time, waiting
        in the streams while no hub read them (a failover, a freeze), then count first:
        before, the rebuilt deadline fired ahead of them, and the cue failed or was called
        again for work already done."""
        settled = handled is None  # the term's first deadlines wait for the router
        woken_by = time.monotonic()  # when the last wait was to end at the latest
        while not stop.is_set():
            now = self.engine.clock()
            if time.monotonic() - woken_by > STALL_S:
                settled = handled is None
            if self._timers and self._timers[0].at <= now and not settled:
                assert handled is not None
                await handled(now)
                settled = True
                woken_by = time.monotonic()
                continue
            due: list[Timer] = []
            while self._timers and self._timers[0].at <= now:
                due.append(heapq.heappop(self._timers))
            if due:
                await self.step(partial(_fire_timers, due=due))
                woken_by = time.monotonic()
                continue
            wait_s = max(min(self._timers[0].at - now, 1.0) if self._timers else 1.0, 0.001)
            self._wake.clear()
            woken_by = time.monotonic() + wait_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)


def _heard(task: asyncio.Task[None]) -> None:
    """A write left behind was heard of: its failure is `broken` or `stale` already."""
    if not task.cancelled():
        task.exception()


def _agents_online(engine: Engine, agents: Mapping[str, Candidate]) -> None:
    engine.agents_online(agents)


def _fire_timers(engine: Engine, due: list[Timer]) -> None:
    for timer in due:
        inputs.on_timer(engine, timer)
