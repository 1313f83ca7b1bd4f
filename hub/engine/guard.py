"""What a specialist's message may touch, and the violations when it reaches further.

A specialist's message takes effect only on the runs and cues it is a target of; a context
entry belongs to the agent that first wrote it; its escalations name its own run (and cue),
are recorded as raised by it and are capped in severity. Everything else is a protocol
violation, escalated once per slot: (kind, from a fixed set; the authenticated sender; the
run and cue only when they are real and the sender takes part in them). No value a sender
chooses freely ever makes a new slot, so a flood of made-up run ids costs one escalation.
"""

from __future__ import annotations

from datetime import UTC

from hub.engine.core import Engine
from hub.engine.state import CueRun, RunState
from protocols import payloads as p
from protocols.codec import Envelope
from protocols.messages import MessageType as T
from protocols.states import CueState, Severity

# The kinds of protocol violation. The router's own: an entry it could not use.
BAD_MESSAGE = "bad_message"  # not JSON, unknown type, bad payload, oversized, bad fields
SPOOFED_SENDER = "spoofed_sender"  # the body names another sender than its stream
NOT_ALLOWED = "not_allowed"  # a type only the hub sends
HANDOFF_REJECTED = "handoff_rejected"  # a handoff outside a run that its contracts refuse
HANDOFF_FLOOD = "handoff_over_budget"  # handoffs outside a run, past the sender's budget
REJECTED_BAD_ID = "rejected_bad_id"  # status.rejected naming no entry id
REJECTED_UNKNOWN_ENTRY = "rejected_unknown_entry"  # ...naming no entry of its inbox
# The engine's: a message reaching past what its sender takes part in.
UNKNOWN_RUN = "unknown_run"  # no such run (made up, or expired): a run that ended is late
NOT_IN_RUN = "not_in_run"  # a run none of whose cues targets the sender
UNKNOWN_CUE = "unknown_cue"
NOT_A_TARGET = "not_a_target"  # a cue of its run that does not target it
OUT_OF_ORDER = "out_of_order"
CONTEXT_OWNED = "context_owned"  # a context entry another agent wrote
CONTEXT_FULL = "context_full"
ESCALATION_WITHOUT_RUN = "escalation_without_run"
BAD_USAGE = "bad_usage"  # a task.context whose metadata.usage is not a usage
KINDS = frozenset({
    BAD_MESSAGE, SPOOFED_SENDER, NOT_ALLOWED, HANDOFF_REJECTED, HANDOFF_FLOOD, REJECTED_BAD_ID,
    REJECTED_UNKNOWN_ENTRY, UNKNOWN_RUN, NOT_IN_RUN, UNKNOWN_CUE, NOT_A_TARGET, OUT_OF_ORDER,
    CONTEXT_OWNED, CONTEXT_FULL, ESCALATION_WITHOUT_RUN, BAD_USAGE,
})  # fmt: skip

CONTEXT_KEYS_MAX = 256  # keys one run's context may hold (each has an owner in the run)
DEAD_REPLY = "a reply from"  # how a cue's reason says a reply of its target was refused
DETAIL_CHARS = 500  # of a violation's detail (it may quote what the sender sent)
_SEVERITIES = (Severity.LOW, Severity.MEDIUM, Severity.HIGH, Severity.CRITICAL)
_RANK = {s: i for i, s in enumerate(_SEVERITIES)}


def violation(
    engine: Engine, run: RunState | None, cue_id: str | None, kind: str, sender: str,
    detail: str, *, stream: str = "", entry_id: str = "",
) -> None:  # fmt: skip
    """Record, count and escalate (once per slot, counted after) a protocol violation.
    `run` (and `cue_id`) only when real and the sender takes part in them: a run the
    sender has no part in is never touched by what it sends."""
    assert kind in KINDS, kind
    detail = detail[:DETAIL_CHARS]
    if run is not None:
        run.record.protocol_violations += 1
        run.record.note("errors", detail)
        engine.mark_dirty(run)
    payload = p.EscalationProtocolViolation(
        severity=Severity.MEDIUM, cause=f"{kind}:{sender}", detail=detail, reason=kind,
        stream=stream, entry_id=entry_id, sender=sender,
    )  # fmt: skip
    engine.escalate(run, cue_id, T.ESCALATION_PROTOCOL_VIOLATION, payload)


def _violation(engine: Engine, msg: Envelope, kind: str, detail: str,
               run: RunState | None = None, cue_id: str | None = None) -> None:  # fmt: skip
    violation(engine, run, cue_id, kind, msg.from_agent, detail, entry_id=msg.message_id)


def takes_part(engine: Engine, run: RunState, agent: str) -> bool:
    """Whether some cue of the run targets `agent` (by name, resolved by capability, or
    reassigned to it by a debugger), or is its debugger."""
    plan = engine.plans[run.run_id]
    if agent in plan.agents:
        return True
    if any(_resolved(run, cue_id, agent) for cue_id in plan.by_target):
        return True
    # most cues were never reassigned: those are passed over at the cost of a test
    return any(
        (cr.assigned or cr.decisions) and _reassigned_to(cr, agent) for cr in run.cues.values()
    )


def is_target(engine: Engine, run: RunState, cue_id: str, agent: str) -> bool:
    """Whether `agent` may answer for the cue: a target of it (named in `target_agents`,
    one its `target` resolved to, this attempt or an earlier one: a reply for an earlier
    attempt is late, not a violation; or whom a debugger reassigned it to), or its
    debugger."""
    cue, cr = engine.plans[run.run_id].cues[cue_id], run.cues[cue_id]
    if _reassigned_to(cr, agent):
        return True
    if cue.target is not None:
        if _resolved(run, cue_id, agent):
            return True
    elif agent in cr.targets or agent in cue.fixed_agents:  # the dict first: O(1)
        return True
    return _debugger_of(engine, run, cue_id) == agent


def is_debugger(engine: Engine, run: RunState, cue_id: str, agent: str) -> bool:
    """Whether `agent` speaks as the cue's debugger (asked now, or late), not as a target."""
    if _debugger_of(engine, run, cue_id) != agent:
        return False
    cr = run.cues[cue_id]
    return cr.debugger == agent or agent not in engine.targets_of(run, cue_id)


def _debugger_of(engine: Engine, run: RunState, cue_id: str) -> str | None:
    repeated = engine.plans[run.run_id].cues[cue_id].on_repeated_failure
    return repeated.debugger if repeated is not None else None


def _reassigned_to(cr: CueRun, agent: str) -> bool:
    """Whether a debugger reassigned the cue to `agent`, now or before (a reply of an
    earlier replacement is late, not a violation, and its usage counts)."""
    if cr.assigned and agent in cr.assigned:
        return True
    return any(d.get("to") == agent and "refused" not in d for d in cr.decisions)


def _resolved(run: RunState, cue_id: str, agent: str) -> bool:
    cr = run.cues[cue_id]
    return agent in cr.resolved or agent in cr.past_targets


def scope(engine: Engine, msg: Envelope, cue_id: str | None, *, cue_required: bool = True
          ) -> RunState | None:  # fmt: skip
    """The run `msg` may act on (and its cue `cue_id` targets the sender), or None after
    escalating why not."""
    sender, mt = msg.from_agent, msg.message_type.value
    run = engine.runs.get(msg.run_id or "")
    if run is None and msg.run_id in engine.ended:  # it ended: late, not made up
        engine.late_reply(None, f"{mt} from {sender} for run {msg.run_id}, which ended")
        return None
    if run is None:
        _violation(engine, msg, UNKNOWN_RUN, f"{mt} from {sender} for unknown run {msg.run_id}")
        return None
    if not takes_part(engine, run, sender):
        detail = f"{mt} from {sender} for run {run.run_id}, which does not target it"
        _violation(engine, msg, NOT_IN_RUN, detail)
        return None
    if run.status.done:
        engine.late_reply(run, f"{mt} from {sender} for run {run.run_id}, which ended")
        return None
    if cue_id is None and not cue_required:
        return run
    if cue_id is None or cue_id not in run.cues:
        _violation(engine, msg, UNKNOWN_CUE, f"{mt} from {sender}: no cue {cue_id} in run", run)
        return None
    if not is_target(engine, run, cue_id, sender):
        detail = f"{mt}: {sender} is not a target of {cue_id}"
        _violation(engine, msg, NOT_A_TARGET, detail, run, cue_id)
        return None
    return run


def context(engine: Engine, run: RunState, msg: Envelope) -> None:
    """task.context: an entry of the run's shared context, attributed to its sender. A key
    another agent wrote stays theirs (the hub and operators may overwrite any)."""
    body, sender = msg.body(p.TaskContext), msg.from_agent
    owner = run.context_owners.get(body.key)
    if owner is not None and owner != sender:
        detail = f"{sender} may not overwrite context {body.key!r}: it was written by {owner}"
        _violation(engine, msg, CONTEXT_OWNED, detail, run, msg.cue_id)
        return
    if owner is None and len(run.context_owners) >= CONTEXT_KEYS_MAX:
        detail = f"context {body.key!r} from {sender}: the run's context is full"
        _violation(engine, msg, CONTEXT_FULL, detail, run, msg.cue_id)
        return
    if owner is None:
        run.context_owners[body.key] = sender
        engine.out.owners.append((run.run_id, body.key))
    # the protocol's sent_at is UTC: one with no offset is read as UTC, never as this
    # hub's local time (whose timestamp() of 0001-01-01 raises inside the step)
    sent = msg.sent_at if msg.sent_at.tzinfo else msg.sent_at.replace(tzinfo=UTC)
    entry = {
        "value": body.value, "source": sender, "timestamp": sent.timestamp(),
        "tags": body.tags, "metadata": body.metadata, "cue_id": msg.cue_id,
    }  # fmt: skip
    engine.out.context.append((run.run_id, body.key, entry))
    engine.record_event(run, "context", key=body.key, source=sender)


def specialist_escalation(engine: Engine, msg: Envelope, max_severity: Severity) -> None:
    """An escalation a specialist raised about its own run (and cue): recorded as raised by
    it, its severity capped, deduplicated per (run, cue, type, sender); a question (cause
    `input_required...`) has a slot of its own there, freed when it is answered (answers.py),
    so a later question is asked anew and an error never swallows a question."""
    if msg.run_id is None:
        _violation(engine, msg, ESCALATION_WITHOUT_RUN,
                   f"{msg.message_type.value} from {msg.from_agent} names no run")  # fmt: skip
        return
    run = scope(engine, msg, msg.cue_id, cue_required=False)
    if run is None:
        return
    body = msg.body(p.Escalation)
    capped = cap(body.severity, max_severity)
    payload = body.model_copy(update={"severity": capped}) if capped != body.severity else body
    slot = f"{msg.message_type.value}:{msg.from_agent}"
    if body.cause.startswith(p.ASKS_INPUT):
        slot = f"{slot}:{p.ASKS_INPUT}"
    engine.escalate(
        run, msg.cue_id, msg.message_type, payload, raised_by=msg.from_agent, cause=slot
    )


def cap(severity: Severity, most: Severity) -> Severity:
    """`severity`, no higher than `most`, and never critical: only the hub or an operator
    may pause everything."""
    ceiling = min(_RANK[most], _RANK[Severity.HIGH])
    return severity if _RANK[severity] <= ceiling else _SEVERITIES[ceiling]


def refused_entry(
    engine: Engine, *, kind: str, sender: str, detail: str, stream: str, entry_id: str,
    letter_id: str | None, run_id: str | None, cue_id: str | None,
) -> None:  # fmt: skip
    """An entry of `sender`'s out stream the router refused (dead-lettered as `letter_id`).
    When its body names a run and cue that target the sender, it was a reply that will
    never count: the cue says so (reason, event), and its timeout will too."""
    run = engine.runs.get(run_id or "")
    linked = (
        run is not None and cue_id is not None and cue_id in run.cues
        and takes_part(engine, run, sender) and is_target(engine, run, cue_id, sender)
    )  # fmt: skip
    if run is None or cue_id is None or not linked:
        violation(engine, None, None, kind, sender, detail, stream=stream, entry_id=entry_id)
        return
    where = f"dead letter {letter_id}" if letter_id else "not kept: over its sender's budget"
    cr = run.cues[cue_id]
    if not cr.state.done:
        note = f"{DEAD_REPLY} {sender} was dead-lettered ({where}): {detail[:200]}"
        cr.dead_replies[sender] = where
        base = (cr.reason or "").split(f"; {DEAD_REPLY} ", 1)[0]  # the latest note only
        engine.set_reason(run, cue_id, f"{base}; {note}" if base else note)
    engine.record_event(run, "dead_letter", cue=cue_id, agent=sender, dead_letter=letter_id,
                        reason=detail[:200])  # fmt: skip
    violation(engine, run, cue_id, kind, sender, detail, stream=stream, entry_id=entry_id)


# The messages that call an agent to a cue (as their type is spelled on the wire), and the
# cue state each leaves its cue in until its targets answer
CALLED_IN = {
    T.COORD_WARNING.value: CueState.WARNING, T.COORD_STANDBY.value: CueState.STANDBY,
    T.COORD_GO.value: CueState.GO, T.TASK_ASSIGN.value: CueState.GO,
}  # fmt: skip


def rejected_call(
    engine: Engine, *, sender: str, message_type: str, run_id: str, cue_id: str, attempt: int,
    reason: str, letter_id: str | None,
) -> None:  # fmt: skip
    """A target dead-lettered (`status.rejected`) the call of the attempt its cue is in: it
    will never answer it, so the attempt fails now, saying why, instead of at its phase's
    timeout (a GO's is ten minutes by default). A call of an earlier attempt, one the cue is
    past, or a sender that is not its target changes nothing: the dead letter is the record."""
    run = engine.runs.get(run_id)
    cr = run.cues.get(cue_id) if run is not None else None
    if run is None or cr is None or cr.attempt != attempt:
        return
    if cr.state is not CALLED_IN.get(message_type) or not is_target(engine, run, cue_id, sender):
        return
    where = f" (dead letter {letter_id})" if letter_id else ""  # none: over its budget
    error = f"{sender} rejected its {message_type}{where}: {reason}"
    engine.stand_down(run, cue_id, error)
    engine.fail_attempt(run, cue_id, error)
