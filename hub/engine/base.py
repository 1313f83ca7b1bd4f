"""What every part of the run engine shares: its state, the outbox, and small helpers."""

from __future__ import annotations

import collections
import itertools
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable
from typing import Any

from hub.engine.escalations import Escalation, EscalationBook
from hub.engine.outbox import Outbox, Timer
from hub.engine.plan import Plan
from hub.engine.resources import ResourceBook
from hub.engine.state import CueRun, RunState
from protocols import payloads as p
from protocols.codec import make
from protocols.contracts import Contract
from protocols.errors import NotFound
from protocols.keys import Keys
from protocols.messages import HUB
from protocols.messages import MessageType as T
from protocols.states import (
    CueState,
    FiredBy,
    Phase,
    TargetState,
)
from protocols.targeting import Candidate, Target

log = logging.getLogger(__name__)
ACTIVE = (CueState.WARNING, CueState.STANDBY, CueState.GO)
ENDED_MAX = 10_000  # ended run ids remembered in memory (older ones: asked of Redis)
MOVING = frozenset({CueState.PENDING, *ACTIVE})  # cues that move on without an operator
# Cues one step evaluates of a run that is starting, or of the successors a completed cue
# releases: the rest wait in the backlog for later steps, so no step holds the loop long.
CHUNK = 256
# Names a cue's reason lists (the rest counted): a wide cue's reason, written with each of
# its steps and shown on the desk, stays a line long
REASON_NAMES = 8
PAUSED = "GO paused: "  # how a cue whose GO a pause (or a spent budget) holds back says so


class EngineBase(ABC):
    """State of the engine and the helpers its parts (core, contest, alerts) share."""

    early_warning: bool = True  # warn a successor when its last predecessor is GO'd

    def __init__(
        self,
        keys: Keys,
        *,
        clock: Callable[[], float] = time.time,
        contract_of: Callable[[str], Contract | None] = lambda agent: None,
    ) -> None:
        self.keys = keys
        self.clock = clock
        self.contract_of = contract_of
        self.runs: dict[str, RunState] = {}
        self.plans: dict[str, Plan] = {}  # by run id
        self.book = ResourceBook()
        self.escalations = EscalationBook()
        self.paused: str | None = None  # reason GOs are paused (critical escalation)
        self.out = Outbox()
        self.open: dict[str, int] = {}  # run id -> cues not yet done, kept by `_set`
        self.moving: dict[str, int] = {}  # run id -> cues pending or in the call (`_set`)
        # runs that ended (forgotten, or found in Redis when a message named them): a
        # message for one is late, not a violation; the most recent ENDED_MAX are kept
        self.ended: collections.OrderedDict[str, None] = collections.OrderedDict()
        # (run id, cue id) of cues to evaluate in a later step (see CHUNK): the PENDING cues
        # of a big run that is starting, the successors of a cue that released thousands
        self.backlog: collections.deque[tuple[str, str]] = collections.deque()
        # targets by capability (hub.engine.targets): the online agents, as the registry
        # last said; when each was last chosen; the agents of every cue in a call
        self.directory: dict[str, Candidate] = {}
        # id(target) -> (target, the online agents it matches, the reason of a cue waiting
        # for more), while `directory` stands
        self.matching_now: dict[int, tuple[Target, list[str], str]] = {}
        self.last_chosen: dict[str, int] = {}
        self._choices = 0
        self.engaged: dict[tuple[str, str], tuple[str, ...]] = {}
        self.loads: dict[str, int] = {}  # agent -> how many of `engaged` name it
        self.stand_ins = False  # a dry run's engine: stand-ins for targets nothing matches

    def note_ended(self, run_ids: Iterable[str]) -> None:
        """Remember runs that ended: a late reply to one is counted, never escalated."""
        for run_id in run_ids:
            self.ended[run_id] = None
            self.ended.move_to_end(run_id)
        while len(self.ended) > ENDED_MAX:
            self.ended.popitem(last=False)

    def late_reply(self, run: RunState | None, what: str) -> None:
        """A reply for an attempt, a cue or a run that already ended (an agent that timed
        out and woke): counted (the metric; the run's record while the run is known) and
        logged, never escalated: it is no one's fault and changes nothing."""
        self.out.late += 1
        if run is not None:
            run.record.late_replies += 1
            self.mark_dirty(run)
        log.debug("late reply: %s", what)

    def take(self) -> Outbox:
        """What the steps since the last `take` produced, for the driver to commit (the
        runs they touched are holding or running as they now stand)."""
        self.review_budgets(self.out.dirty)
        self.review_holds(self.out.dirty)
        out, self.out = self.out, Outbox()
        return out

    def write_with_step(self, ops: list[list[Any]]) -> None:
        """Raw one-key commands to run in this step's fenced write, after the engine's own
        (the router's forwards and XACKs: nothing is acknowledged before it is stored)."""
        self.out.raw.extend(ops)

    def broadcast(self, mt: T, payload: p.Payload) -> None:
        """Send a broadcast.* to every replica (with this step's write)."""
        self.out.messages.append((self.keys.broadcast, make(mt, payload)))

    def contract_in(self, run: RunState, agent: str) -> Contract | None:
        """The agent's contract as the run sees it: the cuelist's inline one, else the
        registry's."""
        found: Contract | None = self.plans[run.run_id].contract(agent) or self.contract_of(agent)
        return found

    def action_of(self, run: RunState, cue_id: str) -> dict[str, Any]:
        """The cue's action, with what a debugger's `retry` changed in it."""
        action = dict(self.plans[run.run_id].cues[cue_id].action)
        action.update(run.cues[cue_id].action_update)
        return action

    def _send_all(self, run: RunState, cue_id: str, mt: T, payload: p.Payload) -> None:
        """One message to every target of the cue: one envelope (one id, `target_agents`
        naming them all), a copy in each target's inbox; built and encoded once."""
        self._send_to(run, cue_id, self.targets_of(run, cue_id), mt, payload)

    def _send_to(
        self, run: RunState, cue_id: str, agents: tuple[str, ...], mt: T, payload: p.Payload
    ) -> None:
        targets = agents
        msg = make(mt, payload, target_agents=targets, run_id=run.run_id, cue_id=cue_id)
        self.out.messages.extend((self.keys.inbox(agent), msg) for agent in targets)
        run.record.messages_out += len(targets)

    def stand_down(self, run: RunState, cue_id: str, reason: str) -> None:
        """Tell the targets of a cue in WARNING, STANDBY or GO to stop (coord.standdown)."""
        cr = run.cues[cue_id]
        if cr.state not in ACTIVE:
            return
        payload = p.CoordStanddown(cue_id=cue_id, attempt=max(cr.attempt, 1), reason=reason)
        self._send_all(run, cue_id, T.COORD_STANDDOWN, payload)
        cr.targets = {a: TargetState.STOOD_DOWN for a in cr.targets}
        cr.early = False

    def go_held(self, run: RunState, cue_id: str) -> None:
        """A GO held back (GOs paused, or a spent budget) goes now, if it may: a cue's
        in STANDBY, or a direct cue's task.assign, held in the state its call was in (armed:
        an operator's GO; pending or waiting: fired, or a retry its debugger chose; go: a
        retry), fired again with the trigger it had; or a debugger's task held back after a
        failure (hub.engine.debugging), sent."""
        cr = run.cues[cue_id]
        if cr.state is CueState.STANDBY:
            if _all(cr, TargetState.READY):
                self.go(run, cue_id)
            else:  # a target said not ready while it was held: its STANDBY deadline runs
                # again (the hold had cleared it), as for a call never held
                not_ready = "; ".join(f"{a} not ready: {r}" for a, r in cr.not_ready.items())
                self.set_reason(run, cue_id, not_ready or _missing(T.ACK_STANDBY, cr))
                cue = self.plans[run.run_id].cues[cue_id]
                self._deadline(run, cue_id, Phase.STANDBY, cue.standby_timeout_s)
        elif cr.state is CueState.GO:  # claimed already
            self.go(run, cue_id, assign=True)
        elif cr.state in (CueState.ARMED, CueState.PENDING, CueState.WAITING) and (
            not self.consult_held(run, cue_id)  # a debugger's task held back: asked now
        ):
            self.fire(run, cue_id, cr.fired_by or FiredBy.DEPENDENCIES)

    def _deadline(self, run: RunState, cue_id: str, phase: Phase, seconds: float) -> None:
        cr = run.cues[cue_id]
        cr.deadline, cr.deadline_phase = self.clock() + seconds, phase
        self.out.timers.append(Timer(cr.deadline, run.run_id, cue_id, cr.attempt, phase.value))

    @staticmethod
    def clear_deadline(cr: CueRun) -> None:
        """Drop the cue's deadline: its timer then finds nothing to do."""
        cr.deadline = cr.deadline_phase = None

    def _set(
        self, run: RunState, cue_id: str, state: CueState, reason: str | None,
        root: str | None = None, **event: Any,
    ) -> None:  # fmt: skip
        """The one place a cue's state and reason change. A new state is a `cue` event; a
        new reason in the same state a `reason` event (so a watcher never shows a stale
        one). `root` is the root-cause cue of a block; `event` adds to the event."""
        cr = run.cues[cue_id]
        changed = cr.state is not state
        was_active = cr.state in ACTIVE
        if changed:
            self.open_moved(run, cr.state, state)
        self.mark_dirty(run, cue_id)
        if not changed and reason == cr.reason and root is None:
            return
        cr.state, cr.reason = state, reason
        if changed and (state in ACTIVE or was_active):
            self.track_engaged(run, cue_id)
        if root is not None:
            cr.error = root
        kind = "cue" if changed else "reason"
        self.record_event(
            run, kind, cue=cue_id, state=state, reason=reason, attempt=cr.attempt, **event
        )

    def set_reason(self, run: RunState, cue_id: str, reason: str | None) -> None:
        """Say why the cue is where it is (an event when that changes)."""
        self._set(run, cue_id, run.cues[cue_id].state, reason)

    def open_moved(self, run: RunState, was: CueState, now: CueState) -> None:
        """Keep the per-run counts of cues not done (`open`) and of cues that move on their
        own (`moving`: pending, or in the call), as a cue goes from `was` to `now`."""
        run_id = run.run_id
        if was.done is not now.done and run_id in self.open:
            self.open[run_id] += 1 if was.done else -1
        if (was in MOVING) is not (now in MOVING) and run_id in self.moving:
            self.moving[run_id] += -1 if was in MOVING else 1

    def record_event(self, run: RunState, kind: str, **data: Any) -> None:
        """Append an event to the run's event stream (with this step's write). A cue's new
        reason right after its last one in the same write replaces it: they are written
        together, so no reader could see the one in between (a phase's acks that share a
        write cost one event, not one each)."""
        event = {"type": kind, "at": self.clock(), **data}
        cue = data.get("cue")
        if cue is not None:
            key = (run.run_id, cue)
            last = self.out.last_cue_event.get(key)
            if kind == "reason" and last is not None and self.out.events[last][1]["type"] == kind:
                self.out.events[last] = (run.run_id, event)
                return
            self.out.last_cue_event[key] = len(self.out.events)
        self.out.events.append((run.run_id, event))

    def mark_dirty(self, run: RunState, cue_id: str | None = None) -> None:
        """Mark what must be written: the run's header, and the cue when one is named.
        Every change to a CueRun must name its cue here (or go through `_set`)."""
        self.out.dirty.add(run.run_id)
        if cue_id is not None:
            self.out.dirty_cues.add((run.run_id, cue_id))

    def hold_handoff(self, run: RunState, receiver: str, context: dict[str, Any]) -> None:
        """Keep a handoff's context for the receiver's next GO (the last one, when two come)."""
        run.handoffs[receiver] = context
        self.out.handoffs.add((run.run_id, receiver))
        self.mark_dirty(run)

    def give_handoff(self, run: RunState, receiver: str) -> dict[str, Any]:
        """The handoff context held for the receiver, given once (none: empty)."""
        context = run.handoffs.pop(receiver, None)
        if context is None:
            return {}
        self.out.handoffs.add((run.run_id, receiver))
        self.mark_dirty(run)
        return context

    def _run(self, run_id: str) -> RunState:
        run = self.runs.get(run_id)
        if run is None:
            raise NotFound(f"no active run {run_id}")
        return run

    def _cue(self, run: RunState, cue_id: str) -> CueRun:
        cr = run.cues.get(cue_id)
        if cr is None:
            raise NotFound(f"run {run.run_id} has no cue {cue_id}")
        return cr

    # -- the engine's surface across its parts: core.Engine implements it --------------
    # Declared here so each part (core, contest, alerts) and the engine's callers (the
    # driver, the router, inputs) read and type-check against one public surface.
    @abstractmethod
    def adopt(self, run: RunState, plan: Plan, new: bool = False) -> None:
        """Take charge of a run (new, or loaded from the store)."""

    @abstractmethod
    def work_backlog(self, limit: int | None = None) -> bool:
        """Evaluate up to `limit` queued cues; True while more are queued."""

    @abstractmethod
    def evaluate(self, run: RunState, cue_id: str) -> None:
        """Move a cue not yet called as far as its predecessors and conditions allow."""

    @abstractmethod
    def fire(self, run: RunState, cue_id: str, by: FiredBy, early: bool = False) -> None:
        """Start a call of the cue: WARNING (cued) or task.assign (direct)."""

    @abstractmethod
    def fail_cue(self, run: RunState, cue_id: str, error: str) -> None:
        """The cue has failed (no attempt left): its dependents are evaluated."""

    @abstractmethod
    def to_standby(self, run: RunState, cue_id: str) -> None:
        """Every target prepared: claim the cue's resources and send STANDBY."""

    @abstractmethod
    def _unfinished(self, run: RunState, cue_id: str) -> bool:
        """Some predecessor of the cue has not let it go yet (hub.engine.ahead)."""

    @abstractmethod
    def _matching(self, target: Target) -> tuple[list[str], str]:
        """The online agents matching `target`, and why a cue waits for more (targets)."""

    @abstractmethod
    def go(self, run: RunState, cue_id: str, assign: bool = False) -> None:
        """Every target ready: GO (one recorded event per attempt), or task.assign."""

    @abstractmethod
    def targets_of(self, run: RunState, cue_id: str) -> tuple[str, ...]:
        """The agents the cue's messages go to (fixed, or resolved for this attempt)."""

    @abstractmethod
    def track_engaged(self, run: RunState, cue_id: str) -> None:
        """Note the agents of a cue entering or leaving a call (the load of each agent)."""

    @abstractmethod
    def _retire(self, run: RunState, cue_id: str, keep: list[str]) -> None:
        """The agents the cue resolved to before become past targets (but those in `keep`)."""

    @abstractmethod
    def escalate(
        self, run: RunState | None, cue_id: str | None, mt: T, payload: p.Escalation,
        *, raised_by: str = HUB, cause: str | None = None,
    ) -> Escalation:  # fmt: skip
        """Raise an escalation once per (run, cue, cause); later ones are counted on it."""

    @abstractmethod
    def review_holds(self, run_ids: Iterable[str]) -> None:
        """Set each run holding (with its hold_reason) or running, as it now stands."""

    @abstractmethod
    def review_budgets(self, run_ids: Iterable[str]) -> None:
        """Warn (one escalation per limit) for each run whose budget is nearly spent."""

    @abstractmethod
    def consult_held(self, run: RunState, cue_id: str) -> bool:
        """Ask the cue's debugger, if asking it was held back (hub.engine.debugging)."""

    @abstractmethod
    def count_usage(
        self, run: RunState, cue_id: str, agent: str, usage: p.Usage, message_id: str = ""
    ) -> None:
        """Add what `agent` reported spending on the cue to its and the run's totals."""

    @abstractmethod
    def over_budget(self, run: RunState) -> str | None:
        """What of the run's budget is spent ("budget tokens spent 50,112 / 50,000")."""

    @abstractmethod
    def hold_for_budget(self, run: RunState, cue_id: str) -> bool:
        """Before a GO: hold it back (True) when the run's budget is spent."""

    @abstractmethod
    def budget_timers(self, run: RunState) -> None:
        """Set the timers of the run's `wall_s` limit."""

    @abstractmethod
    def arbitrate(self, esc: Escalation, winner: str) -> None:
        """Apply an operator's binding decision on a resource conflict."""


def _all(cr: CueRun, state: TargetState) -> bool:
    return bool(cr.targets) and all(s is state for s in cr.targets.values())


def named(names: Collection[str], in_order: bool = False) -> str:
    """`names` as a reason lists them: the REASON_NAMES first in sorted order (or, with
    `in_order`, as given), then how many more."""
    shown = list(itertools.islice(names if in_order else sorted(names), REASON_NAMES))
    more = len(names) - len(shown)
    return f"{', '.join(shown)} and {more} more" if more else ", ".join(shown)


def _missing(what: T, cr: CueRun) -> str:
    return f"waiting for {what.value} from {named(cr.targets)}"


def _waiting_reason(preds: list[str], flags: list[str]) -> str:
    parts = []
    if preds:
        parts.append("predecessors " + named(preds, in_order=True))
    if flags:
        parts.append("conditions " + named(flags, in_order=True))
    return "waiting for " + " and ".join(parts)
