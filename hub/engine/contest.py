"""Resources contested by cues of any run: claims, pre-emption, arbitration."""

from __future__ import annotations

from hub.engine.base import EngineBase, _all
from hub.engine.escalations import OPEN, RESOLVED, Escalation, Slot
from hub.engine.outbox import ARBITRATION, Timer
from hub.engine.plan import Plan
from hub.engine.resources import Claim
from hub.engine.state import RunState
from protocols import payloads as p
from protocols.errors import Conflict
from protocols.messages import MessageType as T
from protocols.states import (
    ConflictStrategy,
    ConflictType,
    CueState,
    Severity,
    TargetState,
)


class ContestMixin(EngineBase):
    """The engine's part that claims and releases resources under the conflict strategy."""

    def _claim(self, run: RunState, cue_id: str) -> bool:
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        if not cue.resources:
            return True
        strategy = ConflictStrategy(plan.strategy)
        claim = Claim(
            run.run_id, cue_id, tuple(cue.resources), cue.priority, strategy,
            agents=self.targets_of(run, cue_id),
        )  # fmt: skip
        outcome = self.book.claim(claim)
        self.out.resources_changed = True
        if outcome.granted:
            cr.holds = list(cue.resources)
            return True
        names = ", ".join(f"{h.run_id}/{h.cue_id}" for h in outcome.blocked_by) or "a waiter ahead"
        res = ", ".join(cue.resources)
        self._set(run, cue_id, cr.state, f"waiting for resource {res} held by {names}")
        self.clear_deadline(cr)
        run.record.note("waits", f"{cue_id}: resource {res} held by {names}")
        for victim in outcome.preempt:
            self._preempt(victim, by=claim)
        if outcome.arbitrate:
            self._open_conflict(run, cue_id, claim, outcome.blocked_by)
        if outcome.preempt:
            self.retry_waiters([claim])
        return False

    def _preempt(self, victim: Claim, by: Claim) -> None:
        """Priority: a lower cue not yet GO'd is stood down and re-queued."""
        run = self.runs.get(victim.run_id)
        if run is None:
            self.book.release(victim.holder)
            return
        cue_id = victim.cue_id
        why = f"stood down for higher-priority {by.run_id}/{by.cue_id}"
        run.record.note("conflicts", f"{cue_id}: {why}")
        self.stand_down(run, cue_id, why)
        self.clear_deadline(run.cues[cue_id])
        self.book.release(victim.holder)
        run.cues[cue_id].holds = []
        self.book.waiting[victim.holder] = victim  # re-queued behind the winner
        self._set(run, cue_id, CueState.WAITING, f"re-queued: {why}")

    def _release(self, run: RunState, cue_id: str) -> None:
        cr = run.cues[cue_id]
        if not cr.holds and (run.run_id, cue_id) not in self.book.waiting:
            return
        cr.holds = []
        self.out.resources_changed = True
        self.retry_waiters(self.book.release((run.run_id, cue_id)))

    def _release_run(self, run: RunState) -> None:
        self.out.resources_changed = True
        self.retry_waiters(self.book.forget_run(run.run_id))

    def retry_waiters(self, waiters: list[Claim]) -> None:
        for claim in waiters:
            run = self.runs.get(claim.run_id)
            if run is None or run.status.done:
                self.book.waiting.pop(claim.holder, None)
                continue
            cr = run.cues[claim.cue_id]
            if cr.state is CueState.WAITING and cr.fired_by is not None:
                self.fire(run, claim.cue_id, cr.fired_by)  # re-queued: call it again
            elif cr.state is CueState.WARNING and _all(cr, TargetState.PREPARED):
                self.to_standby(run, claim.cue_id)
            elif cr.state in (CueState.PENDING, CueState.WAITING):
                self.evaluate(run, claim.cue_id)

    def _open_conflict(self, run: RunState, cue_id: str, claim: Claim, held: list[Claim]) -> None:
        slot = _conflict_slot(run.run_id, cue_id, claim.resources)
        last = self.escalations.in_slot(slot)
        if last is not None and last.status == RESOLVED:
            if _chose_one_of(last, held):  # the operator kept it for this holder: the cue
                claim.fallback_at = None  # waits, with no new question and no fallback
                return
            # another holder: a new decision to ask for (counted on the resolved one, it
            # reached no operator and its timer alone decided it)
            self.escalations.free_slot(last, forget=True)
        rivals = [claim, *held]
        winner = max(rivals, key=lambda c: (c.priority, -c.seq))
        agents = sorted({a for c in rivals for a in c.agents})
        payload = p.EscalationConflict(
            severity=Severity.MEDIUM, cause=slot[2],
            detail=f"{cue_id} wants {', '.join(claim.resources)} held by "
            + ", ".join(f"{c.run_id}/{c.cue_id}" for c in held),
            agents_involved=agents, conflict_type=ConflictType.RESOURCE,
            resource_in_question=", ".join(claim.resources), proposed_resolution="arbitration",
            suggested_winner=winner.agents[0] if winner.agents else None,
            cues_involved=[f"{c.run_id}/{c.cue_id}" for c in rivals],
        )  # fmt: skip
        esc = self.escalate(run, cue_id, T.ESCALATION_CONFLICT, payload)
        esc.payload["suggested_winner_cue"] = f"{winner.run_id}/{winner.cue_id}"
        claim.fallback_at = esc.created_at + _timeout_s(self.plans[run.run_id])
        self.arbitration_timer(run, cue_id, claim.fallback_at)

    def arbitration_timer(self, run: RunState, cue_id: str, at: float) -> None:
        """The timer at which the cue's open arbitration falls back to priority (set when
        the conflict opens, and again by a new leader: `adopt`)."""
        self.out.timers.append(Timer(at, run.run_id, cue_id, run.cues[cue_id].attempt, ARBITRATION))

    def arbitrate(self, esc: Escalation, winner: str) -> None:
        holder = check_winner(esc, winner)
        claim = self.book.waiting.get(holder)
        if claim is None:  # the waiter waits for it; its timer finds the conflict resolved
            if any(c.holder == holder for c in self.book.held.values()):
                self._note_decision(esc, holder, "keeps")
            return
        self._note_decision(esc, holder, "takes next")
        for r in claim.resources:
            self.book.prefer(r, holder)
            current = self.book.holder_of(r)
            if current is not None and current.holder != holder and not current.went:
                self._preempt(current, by=claim)
        self.retry_waiters([claim])

    def _note_decision(self, esc: Escalation, winner: tuple[str, str], how: str) -> None:
        """The operator's decision, in the record of each run it concerns."""
        res = esc.payload.get("resource_in_question", "")
        text = f"{esc.cue_id}: {'/'.join(winner)} {how} {res} by the operator's arbitration"
        for run_id in dict.fromkeys((esc.run_id, winner[0])):
            run = self.runs.get(run_id or "")
            if run is not None:
                run.record.note("conflicts", text)
                self.mark_dirty(run)

    def arbitration_timeout(self, run: RunState, cue_id: str) -> None:
        """No decision in time: fall back to priority."""
        claim = self.book.waiting.get((run.run_id, cue_id))
        if claim is None:
            return
        esc = self.escalations.in_slot(_conflict_slot(run.run_id, cue_id, claim.resources))
        if esc is None or esc.status != OPEN:
            return  # resolved (or gone): the operator's decision binds, whoever it chose
        if self.clock() < esc.created_at + _timeout_s(self.plans[run.run_id]):
            return  # the timer of an earlier conflict of this attempt: this one's comes later
        claim.strategy, claim.fallback_at = ConflictStrategy.PRIORITY, None
        self.out.resources_changed = True  # the book keeps how the claim is decided now
        run.record.note("conflicts", f"{cue_id}: arbitration timed out, priority decides")
        self.mark_dirty(run)
        outcome_claim = self.book.waiting.pop(claim.holder)
        if self._claim_again(run, outcome_claim):
            self.retry_waiters([outcome_claim])

    def _claim_again(self, run: RunState, claim: Claim) -> bool:
        outcome = self.book.claim(claim)
        for victim in outcome.preempt:
            self._preempt(victim, by=claim)
        return outcome.granted or bool(outcome.preempt)


def _timeout_s(plan: Plan) -> float:
    return float(getattr(plan.cuelist, "arbitration_timeout_s", 30.0))


def _conflict_slot(run_id: str, cue_id: str, resources: tuple[str, ...]) -> Slot:
    """The dedup slot of the cue's conflict over `resources` (the cause `_open_conflict`
    gives it)."""
    return (run_id, cue_id, f"conflict:{','.join(resources)}")


def _chose_one_of(esc: Escalation, held: list[Claim]) -> bool:
    """Did the operator resolve `esc` for one of these holders?"""
    winner = str((esc.resolution or {}).get("winner") or "")
    return bool(winner) and _holder(winner, esc.run_id) in {c.holder for c in held}


def check_winner(esc: Escalation, winner: str) -> tuple[str, str]:
    """The (run, cue) `winner` names among the conflict's rivals; Conflict when it names
    none of them."""
    holder = _holder(winner, esc.run_id)
    rivals = [_holder(c, esc.run_id) for c in esc.payload.get("cues_involved", [])]
    if holder not in rivals:
        raise Conflict(f"{winner} is not one of {', '.join('/'.join(r) for r in rivals)}")
    return holder


def _holder(ref: str, default_run: str | None) -> tuple[str, str]:
    if "/" in ref:
        run_id, cue_id = ref.split("/", 1)
        return (run_id, cue_id)
    return (default_run or "", ref)
