"""One payload model per message type (PROTOCOL.md), and the map from type to model."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from protocols.contracts import AgentRef, Contract
from protocols.messages import MessageType
from protocols.states import ConflictType, FiredBy, Phase, Severity

JSON = dict[str, Any]


def _json_number(value: object) -> object:
    """A JSON number as sent: a boolean or a string is not one."""
    if isinstance(value, bool | str):
        raise ValueError("Input should be a number, not a boolean or a string")
    return value


# With `int` and Field(strict=False, bounds...) before it, JSON Schema's integer: 5 and 5.0,
# not 5.5, `true` or "5" (strict pydantic refuses 5.0, which the schema allows). The bounds
# go in that Field: after the validator, they would be lost from the JSON Schema.
AS_JSON_NUMBER = BeforeValidator(_json_number)


class Payload(BaseModel):
    """Base of every payload: an immutable value that refuses unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# -- status.* ---------------------------------------------------------------------------


class StatusOnline(Payload):
    replica: str
    kind: str = "custom"
    contract: Contract = Field(default_factory=Contract)
    concurrency: int = Field(default=1, ge=1)


class StatusOffline(Payload):
    replica: str
    reason: str = "stopped"


class StatusStarted(Payload):
    attempt: int = Field(default=1, ge=1)
    replica: str = ""


COUNTER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"  # a named usage counter
COUNTERS_MAX = 32  # named counters in one report (and kept per run)
CounterName = Annotated[str, StringConstraints(pattern=COUNTER_PATTERN)]


USAGE_MAX = 2**63 - 1  # tokens, and each named counter: in a report and in a total (int64)
COST_MAX = 1e15  # cost: in a report and in a total


class Usage(Payload):
    """What a specialist spent on a cue, counted against the run's budget: reported with
    `status.completed` (`usage`) or a `task.context` write (`metadata.usage`). A report
    past a cap (tokens and each counter 2^63 - 1, cost 10^15) is refused, and a run's or a
    cue's total stops at it: no report, however large or often sent, breaks the sum."""

    tokens: Annotated[int, Field(ge=0, le=USAGE_MAX), AS_JSON_NUMBER] = 0
    cost: Annotated[float, Field(ge=0, le=COST_MAX, allow_inf_nan=False), AS_JSON_NUMBER] = 0.0
    counters: dict[CounterName, Annotated[int, Field(ge=0, le=USAGE_MAX), AS_JSON_NUMBER]] = Field(
        default_factory=dict, max_length=COUNTERS_MAX
    )

    def plus(self, other: Usage, keep: int = COUNTERS_MAX, kept: Collection[str] = ()) -> Usage:
        """The sum of two usages, each total stopping at its cap. At most `keep` counter
        names stay: every one of `kept` (at most `keep`), then the others in the order first
        seen while slots are left."""
        summed = dict(self.counters)
        for name, n in other.counters.items():
            summed[name] = min(summed.get(name, 0) + n, USAGE_MAX)
        # slots are held for `kept` names, seen or not, so that no number of other names
        # reported first can push out one a budget limits
        left = keep - len(set(kept))
        counters: dict[str, int] = {}
        for name, n in summed.items():
            if name in kept:
                counters[name] = n
            elif left > 0:
                counters[name] = n
                left -= 1
        cost = min(round(self.cost + other.cost, 9), COST_MAX)  # sums of cents stay exact
        tokens = min(self.tokens + other.tokens, USAGE_MAX)
        return Usage(tokens=tokens, cost=cost, counters=counters)


class StatusCompleted(Payload):
    attempt: int = Field(default=1, ge=1)
    result: JSON = Field(default_factory=dict)
    replica: str = ""
    usage: Usage | None = None  # what the work spent (tokens, cost, named counters)


class StatusFailed(Payload):
    attempt: int = Field(default=1, ge=1)
    error: str
    replica: str = ""


class StatusBlocked(Payload):
    attempt: int = Field(default=1, ge=1)
    reason: str
    replica: str = ""


class StatusReport(Payload):
    replica: str
    state: str
    in_flight: int = 0
    detail: JSON = Field(default_factory=dict)


class StatusRequest(Payload):
    reason: str = ""


class StatusRejected(Payload):
    """A specialist asks the hub to dead-letter an entry of its own inbox (undecodable, not
    for it, poison, or refused); the hub copies the entry from that inbox, not from here."""

    entry_id: str  # the inbox entry's Redis id, e.g. "1700000000000-0"
    reason: str
    deliveries: int = Field(ge=1)  # how many times it was delivered (XPENDING's counter)
    replica: str = ""


# -- task.* -----------------------------------------------------------------------------


class TaskAssign(Payload):
    """A `coordination: direct` cue: do it now, no barrier."""

    cue_id: str
    attempt: int = Field(default=1, ge=1)
    action: JSON = Field(default_factory=dict)
    context: JSON = Field(default_factory=dict)
    description: str = ""  # the cue's description in the cuelist


class Artifact(Payload):
    path: str
    hash: str


class HandoffContext(BaseModel):
    """What the sender hands over. Besides the four standard fields, every other key is a
    context item the handoff provides (the receiver's `requires` are checked against them)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    work_completed: list[str] = Field(default_factory=list)
    artifacts_produced: list[Artifact] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)

    def provided_keys(self) -> set[str]:
        """Every key this handoff declares, standard ones included when non-empty."""
        keys = set(self.model_extra or {})
        for name in ("work_completed", "artifacts_produced", "next_steps", "constraints"):
            if getattr(self, name):
                keys.add(name)
        return keys


class TaskHandoff(Payload):
    from_agent: str
    to_agent: AgentRef  # an agent id: the hub forwards to its inbox (a key named after it)
    task_id: str
    attempt: int = Field(default=1, ge=1)
    handoff_context: HandoffContext = Field(default_factory=HandoffContext)


# The cause (prefix) of an escalation that asks an operator a question: resolved with an
# `answer`, the hub forwards the answer to the agent that asked, as `task.input`.
ASKS_INPUT = "input_required"


class TaskInput(Payload):
    """An operator's answer to the question a specialist asked about its cue (an escalation
    whose cause starts with `input_required`), forwarded by the hub to that agent."""

    cue_id: str
    attempt: int = Field(default=1, ge=1)  # the cue's attempt when the answer was given
    escalation_id: str
    cause: str = ""  # the question's cause, as the specialist sent it
    question: str = ""  # the question's detail
    answer: str
    action: JSON = Field(default_factory=dict)  # the cue's action, so any replica can act


class TaskContext(Payload):
    """A write to the run's shared context; the source is the authenticated sender."""

    key: str = Field(min_length=1, max_length=256)
    value: Any = None
    tags: list[str] = Field(default_factory=list)
    metadata: JSON = Field(default_factory=dict)


# -- escalation.* -----------------------------------------------------------------------


class Escalation(Payload):
    severity: Severity = Severity.MEDIUM
    cause: str = ""  # the dedup key within a run and cue
    detail: str = ""


class EscalationError(Escalation):
    pass


class EscalationTimeout(Escalation):
    phase: Phase
    waiting_for: list[str] = Field(default_factory=list)
    timeout_s: float = Field(ge=0, allow_inf_nan=False)
    attempt: int = 1


class EscalationConflict(Escalation):
    agents_involved: list[str]
    conflict_type: ConflictType = ConflictType.RESOURCE
    resource_in_question: str
    proposed_resolution: str
    suggested_winner: str | None = None
    cues_involved: list[str] = Field(default_factory=list)


class EscalationHandoffRejected(Escalation):
    from_agent: str
    to_agent: str
    task_id: str
    missing: list[str] = Field(default_factory=list)


class EscalationProtocolViolation(Escalation):
    reason: str
    stream: str = ""
    entry_id: str = ""
    sender: str = ""


# -- coord.* and acks -------------------------------------------------------------------


class CoordWarning(Payload):
    cue_id: str
    cue_group: str = ""
    target_agents: list[str]
    estimated_go_time: datetime | None = None
    preparation_required: list[str] = Field(default_factory=list)
    attempt: int = Field(default=1, ge=1)
    action: JSON = Field(default_factory=dict)


class CoordStandby(Payload):
    cue_id: str
    target_agents: list[str]
    ready_check: list[str] = Field(default_factory=list)
    attempt: int = Field(default=1, ge=1)


class CoordGo(Payload):
    cue_id: str
    target_agents: list[str]
    attempt: int = Field(default=1, ge=1)
    action: JSON = Field(default_factory=dict)
    context: JSON = Field(default_factory=dict)  # handoff context given to this cue
    fired_by: FiredBy = FiredBy.DEPENDENCIES
    description: str = ""  # the cue's description in the cuelist


class CoordStanddown(Payload):
    cue_id: str
    attempt: int = Field(default=1, ge=1)
    reason: str = ""


class AckWarning(Payload):
    attempt: int = Field(default=1, ge=1)


class AckStandby(Payload):
    attempt: int = Field(default=1, ge=1)
    ready: bool = True
    reason: str = ""  # why not ready


# -- broadcast.* ------------------------------------------------------------------------


class BroadcastNotice(Payload):
    text: str
    severity: Severity = Severity.LOW


class BroadcastPause(Payload):
    reason: str = ""


class BroadcastResume(Payload):
    reason: str = ""


class BroadcastShutdown(Payload):
    reason: str = ""


PAYLOAD_MODELS: dict[MessageType, type[Payload]] = {
    MessageType.STATUS_ONLINE: StatusOnline,
    MessageType.STATUS_OFFLINE: StatusOffline,
    MessageType.STATUS_STARTED: StatusStarted,
    MessageType.STATUS_COMPLETED: StatusCompleted,
    MessageType.STATUS_FAILED: StatusFailed,
    MessageType.STATUS_BLOCKED: StatusBlocked,
    MessageType.STATUS_REPORT: StatusReport,
    MessageType.STATUS_REQUEST: StatusRequest,
    MessageType.STATUS_REJECTED: StatusRejected,
    MessageType.TASK_ASSIGN: TaskAssign,
    MessageType.TASK_HANDOFF: TaskHandoff,
    MessageType.TASK_CONTEXT: TaskContext,
    MessageType.TASK_INPUT: TaskInput,
    MessageType.ESCALATION_ERROR: EscalationError,
    MessageType.ESCALATION_TIMEOUT: EscalationTimeout,
    MessageType.ESCALATION_CONFLICT: EscalationConflict,
    MessageType.ESCALATION_HANDOFF_REJECTED: EscalationHandoffRejected,
    MessageType.ESCALATION_PROTOCOL_VIOLATION: EscalationProtocolViolation,
    MessageType.COORD_WARNING: CoordWarning,
    MessageType.COORD_STANDBY: CoordStandby,
    MessageType.COORD_GO: CoordGo,
    MessageType.COORD_STANDDOWN: CoordStanddown,
    MessageType.ACK_WARNING: AckWarning,
    MessageType.ACK_STANDBY: AckStandby,
    MessageType.BROADCAST_NOTICE: BroadcastNotice,
    MessageType.BROADCAST_PAUSE: BroadcastPause,
    MessageType.BROADCAST_RESUME: BroadcastResume,
    MessageType.BROADCAST_SHUTDOWN: BroadcastShutdown,
}
