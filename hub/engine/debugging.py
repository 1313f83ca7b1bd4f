"""A debugger after repeated failure: the engine's part that counts a cue's failed attempts
in a row, asks its debugger specialist once per streak, and applies the diagnosis (retry,
reassign, abandon), recorded on the cue and in the context.

A cue with `on_repeated_failure: {after: N, debugger: D}` is tried N times in a row (its
`retries` do not apply); after the N-th failure D gets a `task.assign` whose action holds
the FailureHistory (protocols.debugging) and the cue waits, saying so. D's result is a
Diagnosis: the hub writes it to the run's context as `diagnosis.<cue>` (source D), then
retries (only the action keys the cuelist `allow`s may change), reassigns to an online agent
that provides every capability the cue's targets provide, or fails the cue. A new streak
may ask again, at most `max_consults` times; no answer within `timeout_s`, or an answer
that is not a Diagnosis, fails the cue.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from hub.engine.base import PAUSED, EngineBase
from hub.engine.budgets import completion
from hub.engine.outbox import DEBUG, Timer
from hub.engine.state import FAILED_ON_KEPT, RunState
from protocols import payloads as p
from protocols.codec import Envelope
from protocols.debugging import (
    DEBUG_KEY,
    DIAGNOSIS_TAG,
    ERROR_CHARS,
    Decision,
    Diagnosis,
    FailedAttempt,
    FailureHistory,
    diagnosis_key,
)
from protocols.messages import MessageType as T
from protocols.states import CueState, FiredBy

STREAK_KEPT = 10  # failed attempts of a streak kept on the cue (and sent to the debugger)
DECISIONS_KEPT = 20  # consultations recorded on the cue
_REPLIES = (T.STATUS_COMPLETED, T.STATUS_FAILED, T.STATUS_STARTED, T.STATUS_BLOCKED)


class DebugMixin(EngineBase):
    """The engine's part that consults a cue's debugger after repeated failure."""

    def after_failed_attempt(self, run: RunState, cue_id: str, error: str) -> None:
        """An attempt of a cue with on_repeated_failure failed: try again until the streak
        reaches `after`, then ask the debugger (or fail once it was asked enough)."""
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        repeated = cue.on_repeated_failure
        assert repeated is not None
        cr.failures_in_row += 1
        failed = FailedAttempt(
            attempt=cr.attempt, error=error[:ERROR_CHARS],
            targets=list(self.targets_of(run, cue_id)), at=self.clock(),
        )  # fmt: skip
        cr.streak = [*cr.streak, failed.model_dump(mode="json")][-STREAK_KEPT:]
        fresh = [agent for agent in failed.targets if agent not in cr.failed_on]
        cr.failed_on = [*cr.failed_on, *fresh][-FAILED_ON_KEPT:]
        self.mark_dirty(run, cue_id)
        if cr.failures_in_row < repeated.after:
            self.fire(run, cue_id, cr.fired_by or FiredBy.DEPENDENCIES)
        elif cr.consults >= repeated.max_consults:
            self.fail_cue(run, cue_id, f"{error} (its debugger was asked {cr.consults} times)")
        elif (held := self._held(run)) is not None:
            # the debugger's task is new work: held back as a GO is, until GOs resume or
            # the budget is raised (`consult_held`)
            self.clear_deadline(cr)
            self._set(run, cue_id, CueState.WAITING, f"{PAUSED}{held}")
        else:
            self._consult(run, cue_id)

    def consult_held(self, run: RunState, cue_id: str) -> bool:
        """The cue's debugger was not asked, held back by a pause or a spent budget: ask it
        now, or hold it again saying what holds it now (True); False when the cue holds no
        debugger's task back."""
        cr = run.cues[cue_id]
        repeated = self.plans[run.run_id].cues[cue_id].on_repeated_failure
        if repeated is None or cr.debugger is not None or cr.failures_in_row < repeated.after:
            return False
        # a resume may find the budget spent, a raise another limit spent or GOs paused; the
        # reason names what holds it, so the next resume or raise finds the cue again. True
        # even so: the caller fires the cue on False, calling its target again unasked
        if (held := self._held(run)) is not None:
            self._set(run, cue_id, CueState.WAITING, f"{PAUSED}{held}")
        else:
            self._consult(run, cue_id)
        return True

    def _held(self, run: RunState) -> str | None:
        """What holds new work back now: paused GOs, else a spent budget."""
        return self.paused if self.paused is not None else self.over_budget(run)

    def _consult(self, run: RunState, cue_id: str) -> None:
        plan, cr = self.plans[run.run_id], run.cues[cue_id]
        cue = plan.cues[cue_id]
        repeated = cue.on_repeated_failure
        assert repeated is not None
        cr.consults += 1
        cr.debugger = repeated.debugger
        cr.debug_deadline = self.clock() + repeated.timeout_s
        history = FailureHistory(
            run_id=run.run_id, cuelist=plan.name, cue_id=cue_id, description=cue.description,
            targets=list(self.targets_of(run, cue_id)), action=self.action_of(run, cue_id),
            allow=list(repeated.allow), attempts=[FailedAttempt(**a) for a in cr.streak],
            context=dict(cr.go_context), dead_letters=dict(cr.dead_replies),
            candidates=self.candidates(run, cue_id), consult=cr.consults,
        )  # fmt: skip
        why = (
            f"failed {cr.failures_in_row} attempts in a row: waiting for "
            f"{repeated.debugger}'s diagnosis"
        )
        self._set(run, cue_id, CueState.WAITING, why)
        self.out.timers.append(Timer(cr.debug_deadline, run.run_id, cue_id, cr.attempt, DEBUG))
        payload = p.TaskAssign(
            cue_id=cue_id, attempt=cr.attempt, context=dict(cr.go_context),
            action={DEBUG_KEY: history.model_dump(mode="json")},
            description=f"diagnose {cue_id}: {why.split(':', 1)[0]}",
        )  # fmt: skip
        self._send_to(run, cue_id, (repeated.debugger,), T.TASK_ASSIGN, payload)
        self.record_event(run, "debug", cue=cue_id, debugger=repeated.debugger,
                          consult=cr.consults, attempts=cr.failures_in_row)  # fmt: skip

    def candidates(self, run: RunState, cue_id: str) -> list[str]:
        """Online agents a `reassign` may pick: not the cue's targets, none an attempt of it
        failed on (this streak's or an earlier one's: `failed_on`) and not its debugger,
        matching the cue's `target` (its capabilities, filter and labels) when it picks by
        capability, else providing every capability its targets provide (none when they
        provide nothing)."""
        plan = self.plans[run.run_id]
        cue = plan.cues[cue_id]
        cr = run.cues[cue_id]
        targets = self.targets_of(run, cue_id)
        repeated = cue.on_repeated_failure
        skip = {*targets, *cr.failed_on, repeated.debugger if repeated else ""}
        if cue.target is not None:
            found, _ = self._matching(cue.target)
            return sorted(agent for agent in found if agent not in skip)
        needed = {cap for agent in targets for cap in self._provides(run, agent)}
        if not needed:
            return []
        return [
            agent
            for agent in sorted(self.directory)  # online, as the registry last said
            if agent not in skip and needed <= set(self._provides(run, agent))
        ]

    def _provides(self, run: RunState, agent: str) -> list[str]:
        found = self.contract_in(run, agent)
        return list(found.provides) if found else []

    def debugger_reply(self, run: RunState, cue_id: str, msg: Envelope) -> None:
        """The debugger answered (or spoke late): a Diagnosis is applied, anything else
        fails the cue; a reply for a consultation that is over is counted as late."""
        cr = run.cues[cue_id]
        attempt = getattr(msg.payload, "attempt", None)
        if msg.message_type not in _REPLIES or cr.debugger is None or attempt != cr.attempt:
            self.late_reply(run, f"{msg.message_type.value} from debugger {msg.from_agent} "
                            f"for {cue_id} attempt {attempt}")  # fmt: skip
            late = msg.body(p.StatusCompleted) if msg.message_type is T.STATUS_COMPLETED else None
            if late is not None and late.usage is not None and late.attempt <= cr.attempt:
                # its work was done: counted once, as a target's late completion is
                self.count_usage(run, cue_id, msg.from_agent, late.usage, completion(late.attempt))
            return
        if msg.message_type in (T.STATUS_STARTED, T.STATUS_BLOCKED):
            return
        debugger = cr.debugger
        self._end_consult(run, cue_id)
        if msg.message_type is T.STATUS_FAILED:
            why = msg.body(p.StatusFailed).error
            self._give_up(run, cue_id, f"its debugger {debugger} failed: {why}")
            return
        done = msg.body(p.StatusCompleted)
        if done.usage is not None:  # what the diagnosis cost is the run's, as any target's
            self.count_usage(run, cue_id, msg.from_agent, done.usage, completion(done.attempt))
        try:
            found = Diagnosis.model_validate(done.result)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "result"
            self._give_up(
                run, cue_id, f"{debugger} answered no diagnosis ({where}: {first['msg']})"
            )
            return
        self._apply(run, cue_id, debugger, found)

    def debug_timeout(self, run: RunState, cue_id: str, at: float) -> None:
        """The debugger's time is up: the cue fails, saying who did not answer."""
        cr = run.cues[cue_id]
        if cr.debugger is None or cr.debug_deadline is None or cr.debug_deadline > at + 1e-6:
            return
        repeated = self.plans[run.run_id].cues[cue_id].on_repeated_failure
        seconds = repeated.timeout_s if repeated else 0.0
        debugger = cr.debugger
        self._end_consult(run, cue_id)
        self._give_up(run, cue_id, f"its debugger {debugger} gave no diagnosis within {seconds:g}s")

    def _end_consult(self, run: RunState, cue_id: str) -> None:
        cr = run.cues[cue_id]
        cr.debugger = cr.debug_deadline = None
        self.mark_dirty(run, cue_id)

    def _give_up(self, run: RunState, cue_id: str, why: str) -> None:
        error = run.cues[cue_id].error or "failed"
        self._decided(run, cue_id, None, {"decision": None, "why": why})
        self.fail_cue(run, cue_id, f"{error}; {why}")

    def _apply(self, run: RunState, cue_id: str, debugger: str, found: Diagnosis) -> None:
        cr = run.cues[cue_id]
        repeated = self.plans[run.run_id].cues[cue_id].on_repeated_failure
        allow = set(repeated.allow) if repeated else set()
        self._write_diagnosis(run, cue_id, debugger, found)
        record: dict[str, Any] = {"decision": found.decision.value,
                                  "diagnosis": found.diagnosis[:500]}  # fmt: skip
        if found.decision is Decision.ABANDON:
            self._decided(run, cue_id, debugger, record)
            self.fail_cue(run, cue_id, f"abandoned on {debugger}'s diagnosis: {found.diagnosis}")
            return
        if found.decision is Decision.RETRY:
            changed = {k: v for k, v in found.action.items() if k in allow}
            refused = sorted(set(found.action) - allow)
            cr.action_update = {**cr.action_update, **changed}
            record.update(changed=sorted(changed), refused=refused)
        else:
            candidates = self.candidates(run, cue_id)
            to = found.to or (candidates[0] if candidates else None)
            if to is None or to not in candidates:
                offered = ", ".join(candidates) or "none online"
                why = f"{debugger} asked to reassign to {to or 'anyone'}, but only " \
                      f"online agents providing the same may take it ({offered})"  # fmt: skip
                self._decided(run, cue_id, debugger, {**record, "to": to, "refused": why})
                self.fail_cue(run, cue_id, f"{cr.error or 'failed'}; {why}")
                return
            cr.assigned = [to]
            record["to"] = to
            if self.plans[run.run_id].cues[cue_id].target is not None:
                # by capability: the replacement is what the cue resolved to now (the
                # attempt's record, a reply of the agents before it late, not a violation)
                self._retire(run, cue_id, keep=[to])
                cr.resolved = [to]
                self.record_event(
                    run,
                    "targets",
                    cue=cue_id,
                    attempt=cr.attempt + 1,
                    target=cr.target,
                    agents=[to],
                    reassigned_by=debugger,
                )
        self._decided(run, cue_id, debugger, record)
        cr.failures_in_row, cr.streak = 0, []
        self.fire(run, cue_id, cr.fired_by or FiredBy.DEPENDENCIES)

    def _decided(
        self, run: RunState, cue_id: str, debugger: str | None, record: dict[str, Any]
    ) -> None:
        cr = run.cues[cue_id]
        entry = {"consult": cr.consults, "debugger": debugger, "at": self.clock(), **record}
        cr.decisions = [*cr.decisions, entry][-DECISIONS_KEPT:]
        self.mark_dirty(run, cue_id)
        self.record_event(run, "decision", cue=cue_id,
                          **{k: v for k, v in entry.items() if k != "at"})  # fmt: skip

    def _write_diagnosis(self, run: RunState, cue_id: str, debugger: str, found: Diagnosis) -> None:
        """The diagnosis in the run's context, attributed to its debugger (the hub writes it,
        so it takes the key over from whoever wrote it before)."""
        key = diagnosis_key(cue_id)
        if run.context_owners.get(key) != debugger:
            run.context_owners[key] = debugger
            self.out.owners.append((run.run_id, key))
        entry = {
            "value": found.model_dump(mode="json"), "source": debugger,
            "timestamp": self.clock(), "tags": [DIAGNOSIS_TAG],
            "metadata": {"decision": found.decision.value, "consult": run.cues[cue_id].consults},
            "cue_id": cue_id,
        }  # fmt: skip
        self.out.context.append((run.run_id, key, entry))
        self.record_event(run, "context", key=key, source=debugger)
