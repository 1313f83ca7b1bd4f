"""What specialists tell the engine (acks, status, handoffs, context) and deadlines firing.

Every message is checked against the cue's state: an ack out of
order, an ack or a completion from an agent that is not a target, or a message for an
unknown run is counted and escalated once (hub.engine.guard); it never crashes the engine.
A late reply (for an attempt, a cue or a run that already ended) is only counted.
"""

from __future__ import annotations

from hub.engine import guard
from hub.engine.base import PAUSED, named
from hub.engine.budgets import BUDGET, completion, usage_in_context
from hub.engine.core import Engine
from hub.engine.outbox import ARBITRATION, DEBUG, Timer
from hub.engine.state import CueRun, RunState
from protocols import payloads as p
from protocols.codec import Envelope
from protocols.contracts import Contract, validate_handoff
from protocols.errors import HandoffRejected
from protocols.messages import MessageType as T
from protocols.states import CueState, Phase, Severity, TargetState

# Which cue state an input belongs to, and the target state it moves the sender to.
_EXPECTS: dict[T, tuple[CueState, TargetState]] = {
    T.ACK_WARNING: (CueState.WARNING, TargetState.PREPARED),
    T.ACK_STANDBY: (CueState.STANDBY, TargetState.READY),
    T.STATUS_STARTED: (CueState.GO, TargetState.STARTED),
    T.STATUS_COMPLETED: (CueState.GO, TargetState.COMPLETED),
    T.STATUS_FAILED: (CueState.GO, TargetState.FAILED),
    T.STATUS_BLOCKED: (CueState.GO, TargetState.STARTED),
}
_AFTER = {
    CueState.WARNING: (CueState.STANDBY, CueState.GO, CueState.COMPLETED, CueState.FAILED),
    CueState.STANDBY: (CueState.GO, CueState.COMPLETED, CueState.FAILED),
    CueState.GO: (CueState.COMPLETED, CueState.FAILED),
}
ENGINE_TYPES = frozenset({*_EXPECTS, T.TASK_HANDOFF, T.TASK_CONTEXT})


def handle(engine: Engine, msg: Envelope) -> None:
    """Apply one authenticated specialist message to its run: only to a cue that targets
    its sender (guard.scope escalates anything else, without touching the run)."""
    cue_id = msg.cue_id
    if msg.message_type is T.TASK_HANDOFF:
        cue_id = cue_id or msg.body(p.TaskHandoff).task_id
    run = guard.scope(engine, msg, cue_id)
    if run is None or cue_id is None:
        return
    engine.count_message(run, cue_id, msg.from_agent, msg.message_id)
    engine.mark_dirty(run)
    if msg.message_type is T.TASK_CONTEXT:
        guard.context(engine, run, msg)
        _context_usage(engine, run, cue_id, msg)
        return
    cr = run.cues[cue_id]
    if msg.message_type is T.TASK_HANDOFF:
        if guard.is_debugger(engine, run, cue_id, msg.from_agent):
            # its debugger answers for the cue with a diagnosis only: a handoff it sent was
            # taken as the cue's (before anything had failed), and the targets' one dropped
            detail = f"task.handoff: {msg.from_agent} is the debugger of {cue_id}, not a target"
            guard.violation(
                engine, run, cue_id, guard.NOT_A_TARGET, msg.from_agent, detail,
                entry_id=msg.message_id,
            )  # fmt: skip
            return
        _handoff(engine, run, cue_id, cr, msg)
        return
    if guard.is_debugger(engine, run, cue_id, msg.from_agent):
        engine.debugger_reply(run, cue_id, msg)
        return
    _phase_input(engine, run, cue_id, cr, msg)


def _phase_input(engine: Engine, run: RunState, cue_id: str, cr: CueRun, msg: Envelope) -> None:
    expected_cue, new_target = _EXPECTS[msg.message_type]
    attempt = sent_for = getattr(msg.payload, "attempt", cr.attempt)
    agent = msg.from_agent
    if not _current(engine, run, cue_id, cr, agent):
        attempt = -1  # a target of an earlier attempt only (guard.is_target): late
    # a target that completed this attempt did so once: a copy (its XADD sent again after
    # a lost reply, read by a leader that never saw the first) is a duplicate
    again = msg.message_type is T.STATUS_COMPLETED and cr.targets.get(agent) is new_target
    # over for it: its attempt failed, or it was stood down; over for all: the attempt's
    # failure is with the cue's debugger, or the cue waits (no call of it is out)
    over = again or cr.targets.get(agent) in _LAST_WORD or cr.debugger is not None
    over = over or cr.state is CueState.WAITING
    if attempt != cr.attempt or cr.state in _AFTER.get(expected_cue, ()) or cr.state.done or over:
        mt = msg.message_type.value
        engine.late_reply(run, f"{mt} from {agent} for {cue_id} attempt {attempt} "
                          f"(now attempt {cr.attempt}, {cr.state.value})")  # fmt: skip
        mine = sent_for < cr.attempt or (sent_for == cr.attempt and attempt == sent_for)
        if msg.message_type is T.STATUS_COMPLETED and mine and not again:
            _late_usage(engine, run, cue_id, agent, msg.body(p.StatusCompleted), sent_for)
        return  # late or duplicate: it changes nothing (idempotent handling)
    if cr.state is not expected_cue:
        mt = msg.message_type.value
        detail = f"{mt} from {agent} while {cue_id} is {cr.state.value}"
        guard.violation(engine, run, cue_id, guard.OUT_OF_ORDER, agent, detail,
                        entry_id=msg.message_id)  # fmt: skip
        return
    mt = msg.message_type
    if mt is T.STATUS_FAILED:
        cr.targets[agent] = TargetState.FAILED
        engine.fail_attempt(run, cue_id, f"{agent}: {msg.body(p.StatusFailed).error}")
        return
    if mt is T.STATUS_BLOCKED:
        engine.set_reason(run, cue_id, f"{agent} blocked: {msg.body(p.StatusBlocked).reason}")
        return
    if mt is T.ACK_STANDBY and not (ack := msg.body(p.AckStandby)).ready:
        cr.not_ready[agent] = ack.reason or "not ready"
        if cr.targets.get(agent) is TargetState.READY:  # ready before, while its GO was held
            cr.targets[agent] = TargetState.PREPARED  # it takes ready back
        if not (cr.reason or "").startswith(PAUSED):  # a held GO says why it is held (the
            # hold's release finds it so: hub.engine.budgets, Engine.resume)
            engine.set_reason(run, cue_id, f"{agent} not ready: {cr.not_ready[agent]}")
        engine.mark_dirty(run, cue_id)
        return
    if mt is T.STATUS_COMPLETED:
        done = msg.body(p.StatusCompleted)
        cr.keep_result(agent, done.result)
        if done.usage is not None:
            engine.count_usage(run, cue_id, agent, done.usage, completion(attempt))
    elif mt is T.STATUS_STARTED and cr.targets.get(agent) is TargetState.COMPLETED:
        return  # started arrived after completed (reordered redelivery)
    cr.not_ready.pop(agent, None)
    cr.targets[agent] = new_target
    engine.mark_dirty(run, cue_id)
    _advance(engine, run, cue_id, cr)


_LAST_WORD = (TargetState.FAILED, TargetState.STOOD_DOWN)


def _current(engine: Engine, run: RunState, cue_id: str, cr: CueRun, agent: str) -> bool:
    """Whether `agent` (a target of the cue, guard.is_target says) is one of its current
    attempt: not one a debugger's reassign, or a `target` resolved again, replaced."""
    if cr.assigned:
        return agent in cr.assigned
    if engine.plans[run.run_id].cues[cue_id].target is not None:
        return agent in cr.resolved
    return True


def _late_usage(
    engine: Engine, run: RunState, cue_id: str, agent: str, done: p.StatusCompleted,
    attempt: int,
) -> None:  # fmt: skip
    """A late completion changes nothing but the budget: the work it reports was done
    (an attempt past its deadline, or replaced), and dropping its usage let an agent that
    always answers late spend past any limit. Only for an attempt the sender may have
    worked on: an earlier one, or the cue's last while it is still a target of it."""
    if done.usage is not None:
        engine.count_usage(run, cue_id, agent, done.usage, completion(attempt))


def _context_usage(engine: Engine, run: RunState, cue_id: str, msg: Envelope) -> None:
    """A `task.context` write's `metadata.usage`, counted against the run's budget (one
    that is not a usage is a violation: never dropped silently)."""
    usage = usage_in_context(msg.body(p.TaskContext).metadata)
    if isinstance(usage, p.Usage):
        engine.count_usage(run, cue_id, msg.from_agent, usage, msg.message_id)
    elif usage is not None:
        detail = f"task.context from {msg.from_agent}: {usage}"
        guard.violation(engine, run, cue_id, guard.BAD_USAGE, msg.from_agent, detail,
                        entry_id=msg.message_id)  # fmt: skip


def _advance(engine: Engine, run: RunState, cue_id: str, cr: CueRun) -> None:
    goal = _goal(cr.state)  # once: a phase's every ack looks at every target
    waiting = [a for a, s in cr.targets.items() if s is not goal]
    if cr.state is CueState.WARNING:
        if waiting:
            engine.set_reason(run, cue_id, f"waiting for ack.warning from {named(waiting)}")
        elif cr.early:
            engine.clear_deadline(cr)
            engine.set_reason(run, cue_id, "prepared: waiting for its predecessor to complete")
        else:
            engine.to_standby(run, cue_id)
    elif cr.state is CueState.STANDBY:
        if waiting:
            engine.set_reason(run, cue_id, f"waiting for ack.standby from {named(waiting)}")
        else:
            engine.go(run, cue_id)
    elif cr.state is CueState.GO:
        cue = engine.plans[run.run_id].cues[cue_id]
        if waiting:
            why = f"waiting for status.completed from {named(waiting)}"
            engine.set_reason(run, cue_id, why)
        elif cue.handoff and not cr.handoff_ok:
            _no_handoff(engine, run, cue_id, cue.handoff.to)
        else:
            engine.complete(run, cue_id)


def _no_handoff(engine: Engine, run: RunState, cue_id: str, to: str) -> None:
    """Every target completed, and the handoff the cue declares never came: its targets
    have said all they will, so the cue fails now (not at its GO deadline), saying so."""
    receiver = engine.contract_in(run, to)
    needs = f" (requires {', '.join(receiver.requires)})" if receiver and receiver.requires else ""
    engine.fail_attempt(run, cue_id, f"completed without the handoff to {to}{needs}", retry=False)


_GOALS = {CueState.WARNING: TargetState.PREPARED, CueState.STANDBY: TargetState.READY}


def _goal(state: CueState) -> TargetState:
    return _GOALS.get(state, TargetState.COMPLETED)


def _handoff(engine: Engine, run: RunState, cue_id: str, cr: CueRun, msg: Envelope) -> None:
    """task.handoff: checked against the contracts; forwarded, or refused and the cue fails."""
    body = msg.body(p.TaskHandoff)
    plan = engine.plans[run.run_id]
    cue = plan.cues[cue_id]
    agent = msg.from_agent
    over = cr.state.done or cr.state is CueState.WAITING or cr.debugger is not None
    if (
        over
        or body.attempt != cr.attempt
        or cr.targets.get(agent) in _LAST_WORD
        or not (_current(engine, run, cue_id, cr, agent))
    ):  # an attempt's handoff is its own: one sent for another, or after it ended, is late
        sent = f"task.handoff from {agent} for {cue_id} attempt {body.attempt}"
        engine.late_reply(run, f"{sent} (now attempt {cr.attempt}, {cr.state.value})")
        return
    if cr.handoff_ok:
        return
    declared_to = cue.handoff.to if cue.handoff else None
    problem: str | None = None
    missing: list[str] = []
    if body.from_agent != msg.from_agent:
        problem = f"handoff names sender {body.from_agent}, but {msg.from_agent} sent it"
    elif declared_to and body.to_agent != declared_to:
        problem = f"{cue_id} must hand off to {declared_to}, not {body.to_agent}"
    else:
        problem, missing = handoff_problem(
            msg.from_agent, engine.contract_in(run, msg.from_agent),
            body.to_agent, engine.contract_in(run, body.to_agent),
            body.handoff_context.provided_keys(),
        )  # fmt: skip
    if problem:
        payload = p.EscalationHandoffRejected(
            severity=Severity.HIGH, cause="handoff_rejected", detail=problem,
            from_agent=msg.from_agent, to_agent=body.to_agent, task_id=body.task_id,
            missing=missing,
        )  # fmt: skip
        engine.escalate(run, cue_id, T.ESCALATION_HANDOFF_REJECTED, payload)
        if cr.state in (CueState.GO, CueState.STANDBY, CueState.WARNING):
            engine.fail_attempt(run, cue_id, f"handoff rejected: {problem}", retry=False)
        return
    cr.handoff_ok = True
    engine.mark_dirty(run, cue_id)
    engine.hold_handoff(run, body.to_agent, body.handoff_context.model_dump(mode="json"))
    forwarded = msg.model_copy(update={"target_agents": (body.to_agent,)})
    engine.out.messages.append((engine.keys.inbox(body.to_agent), forwarded))
    engine.record_event(run, "handoff", cue=cue_id, to=body.to_agent)
    if cr.state is CueState.GO:
        _advance(engine, run, cue_id, cr)


def handoff_problem(
    sender: str, sender_c: Contract | None, receiver: str, receiver_c: Contract | None,
    context_keys: set[str],
) -> tuple[str | None, list[str]]:  # fmt: skip
    """Why this handoff is refused (and the required keys its actual context lacks), or
    None: the run-time check of protocols.contracts.validate_handoff, not the sender's word."""
    try:
        validate_handoff(sender, sender_c, receiver, receiver_c, context_keys)
    except HandoffRejected as exc:
        return str(exc), exc.missing
    return None, []


def on_timer(engine: Engine, timer: Timer) -> None:
    """A deadline fired: if it is still the current one, escalate and retry or fail."""
    run = engine.runs.get(timer.run_id)
    if run is None or run.status.done:
        return
    if timer.kind == BUDGET:  # wall_s: this step reviews the run's budget and its hold
        engine.mark_dirty(run)
        return
    cr = run.cues.get(timer.cue_id)
    if cr is None or cr.attempt != timer.attempt:
        return
    if timer.kind == ARBITRATION:
        engine.arbitration_timeout(run, timer.cue_id)
        return
    if timer.kind == DEBUG:
        engine.debug_timeout(run, timer.cue_id, timer.at)
        return
    if cr.deadline is None or cr.deadline_phase is None or cr.deadline_phase.value != timer.kind:
        return
    if cr.deadline > timer.at + 1e-6:
        return  # superseded by a later deadline
    phase = cr.deadline_phase
    cue = engine.plans[run.run_id].cues[timer.cue_id]
    goal = _goal(CueState(phase.value))  # a phase is named as its cue state
    waiting = sorted(a for a, s in cr.targets.items() if s is not goal)
    seconds = {Phase.WARNING: cue.ack_timeout_s, Phase.STANDBY: cue.standby_timeout_s}.get(
        phase, cue.go_timeout_s
    )
    what = {Phase.WARNING: T.ACK_WARNING.value, Phase.STANDBY: T.ACK_STANDBY.value}.get(
        phase, "completion"
    )
    detail = f"no {what} from {named(waiting) or 'anyone'} within {seconds:g}s"
    refused = [f"{a}'s reply was dead-lettered ({cr.dead_replies[a]})" for a in waiting
               if a in cr.dead_replies]  # fmt: skip
    if refused:  # the cause, not only the symptom
        detail += f" ({'; '.join(refused)})"
    payload = p.EscalationTimeout(
        severity=Severity.MEDIUM, cause=f"timeout:{phase.value}", detail=detail, phase=phase,
        waiting_for=waiting, timeout_s=float(seconds), attempt=cr.attempt,
    )  # fmt: skip
    engine.escalate(run, timer.cue_id, T.ESCALATION_TIMEOUT, payload)
    engine.stand_down(run, timer.cue_id, detail)
    engine.fail_attempt(run, timer.cue_id, f"timeout: {detail}")


__all__ = ["ENGINE_TYPES", "handle", "on_timer"]
