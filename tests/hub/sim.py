"""An in-memory harness for the pure engine: a fake clock, scripted agents, fired timers."""

from __future__ import annotations

from typing import Any

from hub.engine import inputs
from hub.engine.core import Engine
from hub.engine.outbox import Outbox, Timer
from hub.engine.plan import Plan
from hub.engine.resources import ResourceBook
from hub.engine.state import CueRun, RunState
from hub.store.layout import handoff_fields, owner_fields, read_run, run_fields
from protocols import payloads as p
from protocols.codec import Envelope, make
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.validation import load_cuelist

KEYS = Keys("sim:")


def plan_of(text: str) -> Plan:
    cuelist, version = load_cuelist(text)
    return Plan.build(cuelist, version)


class Sim:
    def __init__(self, *plans: Plan) -> None:
        self.now = 1_000.0
        self.engine = Engine(KEYS, clock=lambda: self.now)
        self.plans = plans
        self.timers: list[Timer] = []
        self.sent: list[tuple[str, Envelope]] = []  # (agent or "*", message)
        self.outs: list[Outbox] = []
        self.persisted: dict[str, dict[bytes, bytes]] = {}  # what the store would hold
        self.events: list[tuple[str, dict[str, Any]]] = []  # (run id, event), in order
        self.said: dict[tuple[str, str], str | None] = {}  # (run, cue) -> reason events told

    def start(
        self, run_id: str = "r1", plan: Plan | None = None, chunk: int | None = None
    ) -> RunState:
        run = self.engine.start_run(plan or self.plans[0], run_id, {}, dry=False, chunk=chunk)
        self._drain()
        return run

    def work_backlog(self, chunk: int | None = None) -> bool:
        more = self.engine.work_backlog(chunk)
        self._drain()
        return more

    def restart(self) -> None:
        """A new engine that resumes every active run from what the store holds."""
        runs = {run_id: read_run(fields) for run_id, fields in self.persisted.items()}
        plans = dict(self.engine.plans)
        self.engine = Engine(KEYS, clock=lambda: self.now)
        for run_id, run in runs.items():
            if run is not None and not run.status.done:
                self.engine.adopt(run, plans[run_id])
        self._drain()

    def take_over(self) -> None:
        """Another hub leads, as `Driver.load` starts its term: the resource book, the runs
        and the escalations from the store, and none of the old leader's timers (they were
        in its memory)."""
        book = ResourceBook.load(self.engine.book.dump())
        held = [e.model_copy(deep=True) for e in self.engine.escalations.by_id.values()]
        runs = {run_id: read_run(fields) for run_id, fields in self.persisted.items()}
        plans = dict(self.engine.plans)
        self.engine = Engine(KEYS, clock=lambda: self.now)
        self.engine.book = book
        for run_id, run in runs.items():
            if run is not None and not run.status.done:
                self.engine.adopt(run, plans[run_id])
        for esc in held:
            self.engine.escalations.take_in(esc)
        self.timers = []
        self._drain()

    def _drain(self) -> None:
        out = self.engine.take()
        self.outs.append(out)
        for stream, msg in out.messages:
            agent = KEYS.agent_of_inbox(stream) or "*"
            self.sent.append((agent, msg))
        self.timers.extend(out.timers)
        self._persist_and_compare(out)
        self._reasons_told(out)
        self._loads_kept()

    def _loads_kept(self) -> None:
        """Each agent's load (cues in a call naming it, kept as cues move) is what counting
        the cues in a call finds."""
        counted: dict[str, int] = {}
        for agents in self.engine.engaged.values():
            for agent in agents:
                counted[agent] = counted.get(agent, 0) + 1
        assert self.engine.loads == counted

    def _reasons_told(self, out: Outbox) -> None:
        """Every change of a cue's reason is an event: what the events said last is what
        each cue's reason is now (a reason set without one fails here)."""
        self.events.extend(out.events)
        for run_id, event in out.events:
            if event["type"] in ("cue", "reason"):
                self.said[(run_id, event["cue"])] = event["reason"]
        for run_id, run in self.engine.runs.items():
            for cue_id, cr in run.cues.items():
                told = self.said.get((run_id, cue_id))
                assert cr.reason == told, f"{cue_id}: reason {cr.reason!r}, events said {told!r}"

    def events_of(self, kind: str, run_id: str = "r1") -> list[dict[str, Any]]:
        return [e for r, e in self.events if r == run_id and e["type"] == kind]

    def _persist_and_compare(self, out: Outbox) -> None:
        """Apply the writes the store would make, then check every run reads back exactly as
        it is in memory: a CueRun changed without being marked dirty fails here."""
        for run_id in out.dirty:
            run = self.engine.runs.get(run_id)
            if run is None:
                continue
            cues = [c for r, c in out.dirty_cues if r == run_id]
            stored = self.persisted.setdefault(run_id, {})
            owned = [k for r, k in out.owners if r == run_id]
            held = sorted(to for r, to in out.handoffs if r == run_id)
            ops = (
                run_fields("key", run, cues, run_id in out.fresh)
                + owner_fields("key", run, owned)
                + handoff_fields("key", run, held)
            )
            for op in ops:
                items = op[2:]
                if op[0] == "HDEL":
                    for name in items:
                        stored.pop(_bytes(name), None)
                    continue
                pairs = zip(items[::2], items[1::2], strict=True)
                stored.update((_bytes(k), _bytes(v)) for k, v in pairs)
        for run_id, run in self.engine.runs.items():
            assert read_run(self.persisted.get(run_id, {})) == run, f"{run_id}: stale write"

    def take_sent(self, mt: T | None = None) -> list[tuple[str, Envelope]]:
        picked = [(a, m) for a, m in self.sent if mt is None or m.message_type is mt]
        self.sent = [(a, m) for a, m in self.sent if (a, m) not in picked]
        return picked

    def send(
        self, agent: str, mt: T, payload: p.Payload, run_id: str = "r1", cue_id: str | None = None
    ) -> None:
        msg = make(mt, payload, from_agent=agent, run_id=run_id, cue_id=cue_id)
        inputs.handle(self.engine, msg)
        self._drain()

    def ack_warning(self, agent: str, cue: str, attempt: int = 1, run_id: str = "r1") -> None:
        self.send(agent, T.ACK_WARNING, p.AckWarning(attempt=attempt), run_id, cue)

    def ack_standby(
        self,
        agent: str,
        cue: str,
        attempt: int = 1,
        ready: bool = True,
        reason: str = "",
        run_id: str = "r1",
    ) -> None:
        self.send(
            agent,
            T.ACK_STANDBY,
            p.AckStandby(attempt=attempt, ready=ready, reason=reason),
            run_id,
            cue,
        )

    def complete(
        self, agent: str, cue: str, attempt: int = 1, run_id: str = "r1", **result: Any
    ) -> None:
        self.send(
            agent,
            T.STATUS_COMPLETED,
            p.StatusCompleted(attempt=attempt, result=result),
            run_id,
            cue,
        )

    def fail(
        self, agent: str, cue: str, attempt: int = 1, error: str = "boom", run_id: str = "r1"
    ) -> None:
        self.send(agent, T.STATUS_FAILED, p.StatusFailed(attempt=attempt, error=error), run_id, cue)

    def call_through(
        self, cue: str, agents: list[str], attempt: int = 1, run_id: str = "r1"
    ) -> None:
        """Answer WARNING, STANDBY and GO of `cue` for every agent."""
        for a in agents:
            self.ack_warning(a, cue, attempt, run_id)
        for a in agents:
            self.ack_standby(a, cue, attempt, run_id=run_id)
        for a in agents:
            self.complete(a, cue, attempt, run_id)

    def advance(self, seconds: float) -> None:
        """Move the clock and fire every timer now due."""
        self.now += seconds
        due = sorted(t for t in self.timers if t.at <= self.now)
        self.timers = [t for t in self.timers if t.at > self.now]
        for timer in due:
            inputs.on_timer(self.engine, timer)
            self._drain()

    def run(self, run_id: str = "r1") -> RunState:
        return self.engine.runs.get(run_id) or self._finished(run_id)

    def _finished(self, run_id: str) -> RunState:
        raise KeyError(run_id)

    def cue(self, cue_id: str, run_id: str = "r1") -> CueRun:
        return self.run(run_id).cues[cue_id]


def _bytes(word: str | bytes) -> bytes:
    """A hash field or value as Redis keeps it (the state's JSON is bytes already)."""
    return word if isinstance(word, bytes) else word.encode()
