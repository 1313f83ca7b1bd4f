"""Request and response models of the API (`XCreate` in, `XPublic` / `XsPublic` out)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from protocols.cuelist import LIMIT_MAX, MAX_TIMEOUT_S
from protocols.errors import CuelistError
from protocols.ids import rfc3339
from protocols.loader import check_plain
from protocols.payloads import AS_JSON_NUMBER, COUNTERS_MAX, CounterName


def ts(epoch: float | None) -> str | None:
    """Epoch seconds as RFC 3339 UTC, or None for what has not happened, and for a time
    RFC 3339 cannot spell (before year 1, after 9999, not finite): clients parse these
    fields as times, so null, never a 500 from `fromtimestamp` nor a string no parser reads."""
    if epoch is None:
        return None
    try:
        return rfc3339(datetime.fromtimestamp(epoch, UTC))
    except (OverflowError, OSError, ValueError):
        return None


class In(BaseModel):
    """A request body: keys it does not know are refused, and values are taken as sent
    (strict: `false` is not a number, `"5"` not an int, `1` not a boolean)."""

    model_config = ConfigDict(extra="forbid", strict=True)


Count = Annotated[int, Field(strict=False, ge=0, le=LIMIT_MAX), AS_JSON_NUMBER]


def _plain(value: dict[str, Any]) -> dict[str, Any]:
    """Free-form JSON within what a command carries to the engine (protocols.loader's
    limits: depth, size, UTF-8 text); past them a 422, not a 500 or a command the engine
    cannot read."""
    try:
        check_plain(value)
    except CuelistError as exc:
        raise ValueError(exc.issues[0].message) from None
    return value


PlainObject = Annotated[dict[str, Any], AfterValidator(_plain)]


class ErrorPublic(BaseModel):
    detail: str


class IssuePublic(BaseModel):
    code: str | None = None
    message: str
    cue: str | None = None
    key: str | None = None
    line: int | None = None
    severity: str | None = None


class CuelistErrorPublic(ErrorPublic):
    errors: list[IssuePublic]


# -- cuelists --------------------------------------------------------------------------
class CuelistStored(BaseModel):
    name: str
    version: str
    warnings: list[IssuePublic] = Field(default_factory=list)
    created: bool = Field(True, description="false when this exact version was stored before")


class ValidationPublic(BaseModel):
    valid: bool
    errors: list[IssuePublic]
    warnings: list[IssuePublic]
    name: str | None = None
    version: str | None = None


class CuelistVersionPublic(BaseModel):
    version: str
    stored_at: str | None
    cuelist: dict[str, Any] | None
    source: str | None = None


class CuelistPublic(BaseModel):
    name: str
    latest: str
    versions: list[CuelistVersionPublic]


class CuelistSummary(BaseModel):
    name: str
    latest: str | None
    versions: int


class CuelistsPublic(BaseModel):
    data: list[CuelistSummary]
    count: int


class CuelistDeleted(BaseModel):
    name: str
    deleted: list[str] = Field(description="the versions deleted")


class SchedulePublic(BaseModel):
    name: str
    schedule: str | None = Field(description="the latest version's cron schedule, if any")
    paused: bool


# -- runs ------------------------------------------------------------------------------
def _budget_change_schema(schema: dict[str, Any]) -> None:
    """At least one key; a counter's name matches its pattern (pydantic's patternProperties
    alone lets any other name through)."""
    schema["minProperties"] = 1
    for option in schema["properties"]["counters"]["anyOf"]:
        if option.get("type") == "object":
            option["additionalProperties"] = False


class BudgetChange(In):
    """Limits of a run's budget: a key given sets that limit (null removes it), a key left
    out keeps it; `counters` are merged by name the same way. At least one key. Each is
    bounded as the budget it is merged into (protocols.cuelist.Budget) bounds it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_budget_change_schema)

    tokens: Count | None = None
    cost: float | None = Field(None, ge=0, allow_inf_nan=False)
    messages: Count | None = Field(None, description="sent to and taken from specialists")
    wall_s: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S, description="from the run's start")
    counters: dict[CounterName, Count | None] | None = Field(
        None, max_length=COUNTERS_MAX, description="named counters' limits"
    )
    warn_at: float | None = Field(None, gt=0, le=1, description="share of a limit that warns")


class RunCreate(In):
    cuelist: str = Field(min_length=1, max_length=200)
    version: str | None = Field(None, max_length=200)
    params: PlainObject = Field(default_factory=dict)
    dry: bool = False
    budget: BudgetChange | None = Field(None, description="merged over the cuelist's budget")


class RunCreated(BaseModel):
    run_id: str


class CuePublic(BaseModel):
    state: str
    reason: str | None
    attempt: int
    retries_used: int = 0
    fired_by: str | None
    go_by: str | None = None
    warned_at: str | None
    standby_at: str | None = None
    go_at: str | None
    completed_at: str | None
    targets: dict[str, str]
    target: dict[str, Any] | None = Field(
        None, description="the cue's `target:` (by capability), recorded when it fires"
    )
    resolved: list[str] = Field(
        default_factory=list, description="the agents its `target` resolved to, this attempt"
    )
    not_ready: dict[str, str] = Field(default_factory=dict)
    error: str | None
    result: dict[str, Any] = Field(
        default_factory=dict,
        description="what each target returned (`Result(result=...)`), by agent; one over "
        "4 KiB is kept as {truncated, bytes, head}",
    )
    assigned: list[str] | None = Field(
        default=None, description="whom a debugger reassigned the cue to (else its targets)"
    )
    debugger: str | None = Field(
        default=None, description="the debugger whose diagnosis the cue waits for now"
    )
    decisions: list[dict[str, Any]] = Field(
        default_factory=list,
        description="each debugger consultation: consult, debugger, decision, diagnosis, "
        "to / changed / refused",
    )
    usage: dict[str, Any] | None = Field(
        None, description="what its targets reported spending: {tokens, cost, counters}"
    )


class RunRecordPublic(BaseModel):
    version: str
    started_at: str | None
    completed_at: str | None
    duration_s: float | None
    counts: dict[str, int]
    fired: list[str]
    waits: list[str]
    conflicts: list[str]
    escalations: list[str]
    errors: list[str]
    messages_in: int
    messages_out: int
    protocol_violations: int
    late_replies: int = Field(
        0, description="acks and status that came after their attempt or run ended (counted)"
    )
    totals: dict[str, int] = Field(
        default_factory=dict,
        description="how many waits, conflicts, escalations and errors there were in all: "
        "each list keeps only the first 20",
    )


class UsagePublic(BaseModel):
    """What a run has used, in the units of its budget's limits."""

    tokens: int = 0
    cost: float = 0.0
    counters: dict[str, int] = Field(default_factory=dict)
    messages: int = Field(0, description="sent to and taken from its specialists")
    wall_s: float = Field(0.0, description="since the run started (to its end, once ended)")


class BudgetPublic(BaseModel):
    run_id: str
    status: str
    hold_reason: str | None
    budget: dict[str, Any]
    usage: UsagePublic


class RunPublic(BaseModel):
    run_id: str
    cuelist: str
    version: str
    status: str
    dry: bool
    params: dict[str, Any]
    conditions: list[str]
    hold_reason: str | None
    rerun_of: str | None = Field(None, description="the run this one reruns")
    reruns: list[str] = Field(default_factory=list, description="runs that rerun this one")
    created_at: str | None
    started_at: str | None
    completed_at: str | None
    record: RunRecordPublic
    budget: dict[str, Any] | None = Field(
        None, description="the run's limits: tokens, cost, messages, wall_s, counters, warn_at"
    )
    usage: UsagePublic
    cues: dict[str, CuePublic]


class RunSummary(BaseModel):
    run_id: str
    cuelist: str
    version: str
    status: str
    hold_reason: str | None = None
    rerun_of: str | None = None
    dry: bool
    started_at: str | None
    completed_at: str | None
    counts: dict[str, int]


class RunsPublic(BaseModel):
    data: list[RunSummary]
    count: int


class GoPublic(BaseModel):
    run_id: str
    cue: str
    state: str
    attempt: int


class RetryPublic(BaseModel):
    run_id: str
    cue: str
    state: str = Field(description="the cue's state after the retry")
    attempt: int
    retried: str = Field(description="the cue tried again: this one, or the failure it waits on")


class RerunCreate(In):
    from_failure: bool = Field(
        False, description="treat the cues that completed as completed (results, context)"
    )


class RerunCreated(BaseModel):
    run_id: str
    rerun_of: str


class ConditionPublic(BaseModel):
    run_id: str
    condition: str
    conditions: list[str]


class ConditionRefused(ErrorPublic):
    """A condition no cue of the run waits for (or, as on every route, a bad request)."""

    conditions: list[str] | None = Field(
        None, description="the conditions cues of the run wait for"
    )
    did_you_mean: str | None = Field(None, description="the closest of them to the name sent")
    errors: list[IssuePublic] | None = Field(None, description="a request that did not parse")


class CancelCreate(In):
    reason: str | None = Field(None, max_length=2000)


class CancelPublic(BaseModel):
    run_id: str
    status: str


class ContextEntryPublic(BaseModel):
    value: Any = None
    source: str | None = None
    timestamp: Any = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ContextPublic(BaseModel):
    run_id: str
    entries: dict[str, ContextEntryPublic]
    count: int


# -- agents, escalations, broadcasts, dead letters ------------------------------------
class ReplicaPublic(BaseModel):
    replica: str
    online: bool
    idle_ms: int | None
    pending: int
    last_seen: str | None


class AgentPublic(BaseModel):
    agent: str
    kind: str
    contract: dict[str, Any]
    replicas: list[ReplicaPublic]
    online: bool
    last_seen: str | None
    consumers: int | None = Field(
        0,
        description="consumers of the agent's group on its inbox; null when not counted (the "
        "inbox has more consumer groups than are listed: an agent can make them up)",
    )
    liveness_read: bool = Field(
        True,
        description="false when the group has too many consumers to list, or the inbox too "
        "many groups (an agent can make them up): replicas are then online as they last "
        "said, not by their idle time",
    )


class AgentsPublic(BaseModel):
    data: list[AgentPublic]
    count: int


class EscalationPublic(BaseModel):
    id: str
    type: str
    severity: str
    run_id: str | None
    cue_id: str | None
    cause: str
    detail: str
    payload: dict[str, Any]
    raised_by: str
    status: str
    count: int
    created_at: str | None
    updated_at: str | None
    resolution: dict[str, Any] | None


class EscalationsPublic(BaseModel):
    data: list[EscalationPublic]
    count: int


class EscalationResolve(In):
    winner: str | None = Field(None, max_length=400, description="`run/cue` or a cue id")
    note: str | None = Field(None, max_length=4000)
    answer: str | None = Field(
        None, max_length=4000,
        description="the answer to an agent's question (cause input_required): sent to it",
    )  # fmt: skip


class DeadLetterPublic(BaseModel):
    id: str
    reason: str
    stream: str | None = None
    entry_id: str | None = None
    group: str | None = None
    deliveries: int = 0
    at: str | None = None
    raw_text: str = Field(default="", description="the head of the entry kept, for display")
    sender: str | None = Field(
        default=None, description="the agent whose stream the entry came from (or who rejected it)"
    )
    raw_size: int = Field(default=0, description="bytes of the whole entry")
    raw_sha256: str = Field(default="", description="SHA-256 of the whole entry")
    raw_truncated: bool = Field(default=False, description="raw_text is only the first bytes")


class DeadLettersPublic(BaseModel):
    data: list[DeadLetterPublic]
    count: int
    next: str | None = Field(
        default=None, description="pass as `before` for the next (older) page; null at the end"
    )


class HealthPublic(BaseModel):
    status: str  # ok, degraded (503: see reasons) or unavailable (503: no Redis, no hub)
    hub_id: str
    leader: bool  # whether this hub leads (some partition of the engine)
    redis: bool
    leader_id: str | None = None  # the hub that holds the leader lease, if any
    reasons: list[str] = []  # why the status is not ok
    loop_lag_ms: float = 0.0  # the event loop's worst lag of the last few seconds
    partitions: list[int] = []  # the engine partitions this hub leads now
