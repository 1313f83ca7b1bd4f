"""Dry runs: the whole cuelist walked with stand-in agents that acknowledge and complete at once.

Nothing is sent to real specialists. What a real run would hold for (hub.engine.alerts), a
GO for an armed cue or a condition only an operator can raise, is assumed given by an
operator, and each such assumption is recorded as a wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hub.engine import inputs
from hub.engine.core import Engine
from hub.engine.outbox import Outbox
from hub.engine.plan import Plan
from hub.engine.state import RunState
from protocols import payloads as p
from protocols.codec import Envelope, make
from protocols.keys import Keys
from protocols.messages import MessageType as T
from protocols.states import CueState
from protocols.targeting import Candidate

_STAND_IN_REPLIES = {T.COORD_WARNING, T.COORD_STANDBY, T.COORD_GO, T.TASK_ASSIGN}
MAX_STEPS = 1_000_000


def dry_run(
    plan: Plan, run_id: str, params: dict[str, Any], keys: Keys,
    agents: Mapping[str, Candidate] | None = None,
) -> tuple[RunState, Outbox]:  # fmt: skip
    """Walk `plan` to its end in memory; returns the run (status `dry`) and what to persist.
    A cue's `target` resolves among `agents` (the online ones) and the cuelist's inline
    contracts; one nothing matches gets stand-ins (`stand-in-1`, ...), noted as a wait."""
    engine = Engine(keys)
    engine.stand_ins = True
    inline = {
        name: Candidate.of(name, contract.model_dump(mode="json"))
        for name, contract in (plan.cuelist.specialists or {}).items()
    }
    engine.directory = {**inline, **(agents or {})}
    run = engine.start_run(plan, run_id, params, dry=True)
    collected = Outbox()
    for _ in range(MAX_STEPS):
        out = engine.take()
        _merge(collected, out)
        replies = [
            r
            for stream, m in out.messages
            if (agent := keys.agent_of_inbox(stream)) is not None
            for r in _stand_in(plan, m, agent)
        ]
        if replies:
            for reply in replies:
                inputs.handle(engine, reply)
            continue
        if engine.backlog:  # cues a completion released past one step's CHUNK
            engine.work_backlog()
            continue
        if run.status.done or not _assume_operator(engine, plan, run):
            break
    collected.messages.clear()  # a dry run sends nothing
    collected.timers.clear()
    _merge(collected, engine.take())
    collected.messages.clear()
    collected.timers.clear()
    return run, collected


def _stand_in(plan: Plan, msg: Envelope, agent: str) -> list[Envelope]:
    phase = msg.payload
    if msg.message_type not in _STAND_IN_REPLIES or msg.cue_id is None:
        return []
    if not isinstance(phase, p.CoordWarning | p.CoordStandby | p.CoordGo | p.TaskAssign):
        return []
    attempt = phase.attempt
    base = {"from_agent": agent, "run_id": msg.run_id, "cue_id": msg.cue_id}
    if msg.message_type is T.COORD_WARNING:
        return [make(T.ACK_WARNING, p.AckWarning(attempt=attempt), **base)]
    if msg.message_type is T.COORD_STANDBY:
        return [make(T.ACK_STANDBY, p.AckStandby(attempt=attempt), **base)]
    cue = plan.cues[msg.cue_id]
    out = []
    if cue.handoff and msg.target_agents and agent == msg.target_agents[0]:
        receiver = plan.contract(cue.handoff.to)
        provided = {k: "(dry run)" for k in (receiver.requires if receiver else ())}
        body = p.TaskHandoff(
            from_agent=agent, to_agent=cue.handoff.to, task_id=msg.cue_id, attempt=attempt,
            handoff_context=p.HandoffContext(**provided),
        )  # fmt: skip
        out.append(make(T.TASK_HANDOFF, body, **base))
    out.append(make(T.STATUS_COMPLETED, p.StatusCompleted(attempt=attempt), **base))
    return out


def _assume_operator(engine: Engine, plan: Plan, run: RunState) -> bool:
    """Give what the run's hold names (hub.engine.alerts), as an operator would: a GO for
    the first armed cue (it may raise what another cue waits for), else the first
    condition that only an operator can raise. False if there is nothing to give."""
    for cue_id in plan.order:
        if run.cues[cue_id].state is CueState.ARMED:
            run.record.note("waits", f"{cue_id}: armed, needs an operator GO (assumed given)")
            engine.operator_go(run.run_id, cue_id)
            return True
    waiting = [c for c in plan.order if run.cues[c].state is CueState.WAITING]
    need = _first((c, engine.unraisable(run, c)) for c in waiting)
    if need is None:  # cues that raise flags for each other, each waiting for the other's
        need = _first((c, [f for f in plan.cues[c].conditions if f not in run.conditions])
                      for c in waiting)  # fmt: skip
    if need is None:
        return False
    cue_id, names = need
    run.record.note("waits", f"{cue_id}: needs conditions {', '.join(names)} (assumed raised)")
    engine.raise_condition(run.run_id, names[0])
    return True


def _first(needs: Iterable[tuple[str, list[str]]]) -> tuple[str, list[str]] | None:
    """The first cue that needs conditions, with them."""
    return next(((c, names) for c, names in needs if names), None)


def _merge(into: Outbox, out: Outbox) -> None:
    into.events.extend(out.events)
    into.escalations.update(out.escalations)
    into.context.extend(out.context)
    into.dirty |= out.dirty
    into.dirty_cues |= out.dirty_cues
    into.fresh |= out.fresh
    into.started |= out.started
    into.finished |= out.finished
    into.messages.extend(out.messages)
