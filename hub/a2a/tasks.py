"""A run seen as an A2A task: task id = run id, its state, status message and artifacts all
computed from the run state in Redis (nothing of the task lives anywhere else, so a task
outlives the hub that started it).

A run is INPUT_REQUIRED when nothing in it moves and what it waits for only an operator
can give: an armed (manual) cue's GO, or a condition no cue that can still complete raises;
a `holding` run too. The status message names what it waits for and how to reply.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.struct_pb2 import Struct, Value
from google.protobuf.timestamp_pb2 import Timestamp

from hub.engine.state import RunState
from hub.store.state import ContextEntry
from protocols.cuelist import Cuelist
from protocols.graph import CueGraph, raised_by_hand_only
from protocols.states import CueState, RunStatus

CONTEXT_PARAM = "a2a_context_id"  # the run param keeping the A2A client's context id
MOVING = frozenset({CueState.PENDING, CueState.WARNING, CueState.STANDBY, CueState.GO})
_FINAL = {
    RunStatus.SUCCESS: TaskState.TASK_STATE_COMPLETED,
    RunStatus.DRY: TaskState.TASK_STATE_COMPLETED,
    RunStatus.PARTIAL: TaskState.TASK_STATE_FAILED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
}
TERMINAL = frozenset(_FINAL.values())
FLOAT_INT_MAX = int(sys.float_info.max)  # past it an int has no float (a Struct's number)


@dataclass(frozen=True)
class Need:
    """Something only an operator can give the run: a condition, or an armed cue's GO."""

    kind: str  # "condition" or "go"
    name: str  # the condition, or the cue id
    cue: str  # the cue that waits for it

    def describe(self) -> str:
        if self.kind == "go":
            reply = f'{{"go": "{self.name}"}}'
            return f"cue {self.name} is armed and waits for a GO (reply {reply})"
        return (
            f'cue {self.cue} waits for condition {self.name} (reply {{"condition": "{self.name}"}})'
        )


def needs(run: RunState, cuelist: Cuelist | None) -> list[Need]:
    """What the run waits for that no cue of it can still give. Without its cuelist (the
    version was deleted) only the run's own record speaks: its armed cues."""
    if run.status.done:
        return []
    if cuelist is None:
        return [Need("go", cid, cid) for cid, cr in run.cues.items() if cr.state is CueState.ARMED]
    cues = {cue.id: cue for cue in cuelist.cues}
    givers: dict[str, set[str]] = {}  # condition -> cues that raise it and may still complete
    for cid, cue in cues.items():
        cr = run.cues.get(cid)
        if cr is not None and not cr.state.done:
            for flag in cue.raises:
                givers.setdefault(flag, set()).add(cid)

    @functools.cache
    def graph() -> CueGraph:  # built only when some flag has a giver to place
        return CueGraph.from_cuelist(cuelist)

    out: list[Need] = []
    for cid, cr in run.cues.items():
        found = cues.get(cid)
        if found is None:
            continue
        if cr.state is CueState.ARMED:
            out.append(Need("go", cid, cid))
        elif cr.state is CueState.WAITING:
            for flag in found.conditions:
                if flag in run.conditions:
                    continue
                # the engine's rule (its hold): no giver but the cue and those after it
                if raised_by_hand_only(cid, givers.get(flag, ()), lambda c: graph().descendants(c)):
                    out.append(Need("condition", flag, cid))
    return out


def state_of(run: RunState, waiting_for: list[Need]) -> TaskState:
    if run.status.done:
        return _FINAL[run.status]
    moving = any(cr.state in MOVING for cr in run.cues.values())
    if run.status is RunStatus.HOLDING or (waiting_for and not moving):
        return TaskState.TASK_STATE_INPUT_REQUIRED
    return TaskState.TASK_STATE_WORKING


def context_id(run: RunState) -> str:
    given = run.params.get(CONTEXT_PARAM)
    return given if isinstance(given, str) and given else run.run_id


def agent_message(run: RunState, text: str, message_id: str) -> Message:
    return Message(
        role=Role.ROLE_AGENT, message_id=message_id, task_id=run.run_id,
        context_id=context_id(run), parts=[Part(text=text)],
    )  # fmt: skip


def status_text(run: RunState, state: TaskState, waiting_for: list[Need]) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(run.counts().items()))
    if state == TaskState.TASK_STATE_INPUT_REQUIRED:
        if run.status is RunStatus.HOLDING and not waiting_for:
            return f"run {run.run_id} is holding: {run.hold_reason}"
        lines = "; ".join(n.describe() for n in waiting_for)
        return f"run {run.run_id} ({run.cuelist}) waits for an operator: {lines}"
    if state in TERMINAL:
        errors = [f"{c}: {cr.error}" for c, cr in run.cues.items() if cr.error]
        tail = f"; errors: {'; '.join(errors)[:1000]}" if errors else ""
        return f"run {run.run_id} ({run.cuelist}) {run.status.value}: {counts}{tail}"
    return f"run {run.run_id} ({run.cuelist}) is running: {counts}"


def status_of(run: RunState, waiting_for: list[Need]) -> TaskStatus:
    state = state_of(run, waiting_for)
    text = status_text(run, state, waiting_for)
    stamp = Timestamp()
    stamp.FromDatetime(datetime.fromtimestamp(last_change(run), UTC))
    # the message id names what it says, so a client (and every hub) tells a new question
    message_id = f"{run.run_id}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return TaskStatus(state=state, message=agent_message(run, text, message_id), timestamp=stamp)


def last_change(run: RunState) -> float:
    times = [run.created_at, run.started_at or 0.0, run.completed_at or 0.0]
    for cr in run.cues.values():
        times += [cr.warned_at or 0.0, cr.go_at or 0.0, cr.completed_at or 0.0]
    return max(times)


def artifacts(run: RunState, context: dict[str, ContextEntry]) -> list[Artifact]:
    """The results every target returned, by cue; and the run's shared context."""
    results = {cid: cr.result for cid, cr in run.cues.items() if cr.result}
    out = [Artifact(artifact_id="results", name="results",
                    description="what each cue's targets returned",
                    parts=[Part(data=_value(results))])]  # fmt: skip
    if context:
        values = {key: entry.value for key, entry in context.items()}
        out.append(Artifact(artifact_id="context", name="context",
                            description="the run's shared context",
                            parts=[Part(data=_value(values))]))  # fmt: skip
    return out


def task_of(
    run: RunState, cuelist: Cuelist | None, context: dict[str, ContextEntry] | None = None
) -> Task:
    waiting_for = needs(run, cuelist)
    task = Task(
        id=run.run_id, context_id=context_id(run), status=status_of(run, waiting_for),
        artifacts=artifacts(run, context or {}),
    )  # fmt: skip
    task.metadata.update(
        {
            "cuelist": run.cuelist, "version": run.version, "status": run.status.value,
            "cues": {cid: cr.state.value for cid, cr in run.cues.items()},
            "waiting_for": [{"kind": n.kind, "name": n.name, "cue": n.cue} for n in waiting_for],
        }
    )  # fmt: skip
    return task


def _value(data: Any) -> Value:
    struct = Struct()
    struct.update({"v": plain(data)})
    return struct.fields["v"]


def plain(data: Any) -> Any:
    """JSON data as a protobuf Struct can hold it (what specialists sent is in results,
    context and events): an int past a float's range as its digits (Struct raises
    OverflowError), NaN and infinities as null (Struct takes them, but its JSON raises)."""
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [plain(value) for value in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, int) and not isinstance(data, bool) and abs(data) > FLOAT_INT_MAX:
        return str(data)
    return data
