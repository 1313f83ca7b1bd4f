"""The cuelist language as pydantic models: Cuelist, Cue, Handoff, OnRepeatedFailure,
CueDefaults.

`Cuelist.model_validate` checks the schema only and merges `defaults` into every cue (a
cue's own value wins) and fills in `start`; the graph, contract and conflict checks are
in `protocols.validation`, which is what callers should use.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from croniter import CroniterError, croniter
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from protocols.contracts import Contract
from protocols.issues import PATTERN_NAMES
from protocols.keys import AGENT_ID_PATTERN
from protocols.payloads import COUNTER_PATTERN, COUNTERS_MAX, CounterName
from protocols.states import ConflictStrategy, Coordination, OnFailure, Overlap
from protocols.targeting import Target

MAX_CUES = 10_000
CUELIST_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
CUE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"  # safe in URLs and Redis keys
NAME_MAX = 256  # characters of a NAME_PATTERN name
NAME_PATTERN = (
    rf"^[A-Za-z0-9][A-Za-z0-9_.:/-]{{0,{NAME_MAX - 1}}}$"  # flags, resources, groups, context keys
)
PATTERN_NAMES.update({
    CUELIST_NAME_PATTERN: "a cuelist name ([a-z0-9][a-z0-9-]*, up to 63 characters)",
    CUE_ID_PATTERN: "a cue id (a letter or digit, then letters, digits, _ . -)",
    NAME_PATTERN: "a name (a letter or digit, then letters, digits, _ . : / -)",
    COUNTER_PATTERN: "a counter name (a letter or digit, then letters, digits, _ . : -)",
})  # fmt: skip


def _unique(items: list[str]) -> list[str]:
    if len(items) < 2 or len(set(items)) == len(items):
        return items
    seen: set[str] = set()
    for item in items:
        if item in seen:
            raise PydanticCustomError("duplicate_item", "'{item}' is listed twice", {"item": item})
        seen.add(item)
    return items


CueId = Annotated[str, StringConstraints(pattern=CUE_ID_PATTERN)]
AgentId = Annotated[str, StringConstraints(pattern=AGENT_ID_PATTERN)]
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Text = Annotated[str, StringConstraints(max_length=4000)]
MAX_TIMEOUT_S = 7 * 86400  # any timeout, and a budget's wall_s: a week
Timeout = Annotated[StrictFloat, Field(gt=0, le=MAX_TIMEOUT_S)]
Names = Annotated[list[Name], AfterValidator(_unique)]
CueIds = Annotated[list[CueId], AfterValidator(_unique)]
Texts = Annotated[list[Text], Field(max_length=100)]


# how many cues ahead of a GO a WARNING may go: 1 (the default) warns a cue when its
# predecessor is GO'd, 2 when the one before that is, `all` down the whole chain; 0 never
# early (the cue is warned once every predecessor is done)
def _warn_ahead(value: Any) -> Any:
    """One clear error for a bad `warn_ahead` (not one per member of the union)."""
    number = isinstance(value, int) and not isinstance(value, bool)
    if value == "all" or (number and 0 <= value <= MAX_CUES):
        return value
    raise PydanticCustomError("bad_warn_ahead", "should be a number of cues (0 or more) or 'all'")


WarnAhead = Annotated[
    Annotated[StrictInt, Field(ge=0, le=MAX_CUES)] | Literal["all"], BeforeValidator(_warn_ahead)
]


class Handoff(BaseModel):
    """On completion the cue's agent hands off to `to`, declaring the `context` keys it sends."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    to: AgentId
    context: Names = Field(default_factory=list)


class OnRepeatedFailure(BaseModel):
    """After `after` failed attempts in a row, `debugger` (a specialist) gets the failure
    history and decides: retry (changing only the `allow`ed action keys), reassign to
    another agent providing the same capabilities, or abandon. Asked at most
    `max_consults` times per cue; no answer within `timeout_s` fails the cue."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    after: Annotated[StrictInt, Field(ge=1, le=100)] = 2
    debugger: AgentId
    allow: Names = Field(default_factory=list)  # action keys a `retry` may change
    timeout_s: Timeout = 300.0
    max_consults: Annotated[StrictInt, Field(ge=1, le=20)] = 3


class CueDefaults(BaseModel):
    """The cue keys `defaults:` may set for every cue (not ids, edges, flags or handoffs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target_agents: Annotated[list[AgentId], Field(min_length=1), AfterValidator(_unique)] | None = (
        None
    )
    action: dict[str, JsonValue] | None = None
    preparation_required: Texts | None = None
    ready_check: Texts | None = None
    conditions: Names | None = None
    manual: StrictBool | None = None
    priority: StrictInt | None = None
    resources: Names | None = None
    outputs: Names | None = None
    on_failure: OnFailure | None = None
    coordination: Coordination | None = None
    ack_timeout_s: Timeout | None = None
    standby_timeout_s: Timeout | None = None
    go_timeout_s: Timeout | None = None
    retries: Annotated[StrictInt, Field(ge=0, le=100)] | None = None
    group: Name | None = None
    on_repeated_failure: OnRepeatedFailure | None = None
    warn_ahead: WarnAhead | None = None


class Cue(BaseModel):
    """One cue: who does what, after what, holding which resources, and how it is called."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: CueId
    description: Text = ""
    # exactly one of the two: fixed agents, or a target resolved among online agents
    target_agents: Annotated[list[AgentId], Field(min_length=1), AfterValidator(_unique)] | None = (
        None
    )
    action: dict[str, JsonValue] = Field(default_factory=dict)  # opaque; sent with GO
    preparation_required: Texts = Field(default_factory=list)
    ready_check: Texts = Field(default_factory=list)
    depends_on: CueIds = Field(default_factory=list)
    conditions: Names = Field(default_factory=list)
    raises: Names = Field(default_factory=list)
    auto_follow: CueId | None = None
    manual: StrictBool = False
    priority: Annotated[StrictInt, Field(ge=-1_000_000, le=1_000_000)] = 0
    resources: Names = Field(default_factory=list)
    outputs: Annotated[list[Text], AfterValidator(_unique)] = Field(default_factory=list)
    handoff: Handoff | None = None
    on_failure: OnFailure = OnFailure.BLOCK
    coordination: Coordination = Coordination.CUED
    ack_timeout_s: Timeout = 5.0
    standby_timeout_s: Timeout = 60.0
    go_timeout_s: Timeout = 600.0
    retries: Annotated[StrictInt, Field(ge=0, le=100)] = 0
    group: Name | None = None  # the cue_group named in the WARNING message
    # with it, `after` attempts in a row fail before the debugger decides (not `retries`)
    on_repeated_failure: OnRepeatedFailure | None = None
    target: Target | None = Field(default=None, validate_default=True)
    warn_ahead: WarnAhead = 1  # how many cues ahead a WARNING may go (or all)

    @field_validator("target")
    @classmethod
    def _one_target(cls, value: Target | None, info: ValidationInfo) -> Target | None:
        if "target_agents" not in info.data:
            return value  # target_agents itself is wrong: reported there
        fixed = info.data["target_agents"] is not None
        if fixed and value is not None:
            raise PydanticCustomError("target_conflict", "give target_agents or target, not both")
        if not fixed and value is None:
            raise PydanticCustomError(
                "no_target", "missing required key 'target_agents' (or 'target')"
            )
        return value

    @property
    def fixed_agents(self) -> tuple[str, ...]:
        """The agents named in `target_agents` (none for a cue with a `target`)."""
        return tuple(self.target_agents or ())


# A budget's whole-number limit: at most what every JSON reader holds exactly (2^53 - 1),
# under what a usage total holds (USAGE_MAX); a schema's `maximum` of 2^63 - 1 is a float
# to most checkers, which then take numbers past it
LIMIT_MAX = 2**53 - 1
Amount = Annotated[StrictInt, Field(ge=0, le=LIMIT_MAX)]


class Budget(BaseModel):
    """A run's limits (`budget:`; `POST /v1/runs` `budget` merges over it). A limit left
    out is not enforced; `counters` limits named counters the specialists report. At
    `warn_at` of a limit one escalation is raised; at the limit no new GO is sent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: Amount | None = None
    cost: Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)] | None = None
    messages: Amount | None = None  # sent to and received from the run's specialists
    wall_s: Timeout | None = None  # from the run's start
    counters: Annotated[dict[CounterName, Amount], Field(max_length=COUNTERS_MAX)] = Field(
        default_factory=dict
    )
    warn_at: Annotated[StrictFloat, Field(gt=0, le=1)] = 0.8

    def merged(self, changes: dict[str, Any]) -> Budget:
        """This budget with `changes` applied: a key given replaces the limit (null removes
        it); `counters` are merged by name the same way. Raises ValidationError."""
        data = self.model_dump(exclude_none=True)
        for key, value in changes.items():
            if key == "counters" and isinstance(value, dict):
                counters = {**data.get("counters", {}), **value}
                data["counters"] = {k: v for k, v in counters.items() if v is not None}
            elif value is None:
                data.pop(key, None)
            else:
                data[key] = value
        return Budget.model_validate(data)


def next_fire(schedule: str, after: float) -> float | None:
    """The first time after `after` (epoch seconds) that a valid cron `schedule` matches;
    None when none comes (February 30th, a year gone by: croniter calls them valid)."""
    try:
        return float(croniter(schedule, after).get_next(float))
    except CroniterError:
        return None


class Cuelist(BaseModel):
    """A named list of cues with its schedule, entry cues, defaults and inline contracts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cuelist: Annotated[str, StringConstraints(pattern=CUELIST_NAME_PATTERN)]
    description: Text = ""
    schedule: str | None = None
    overlap: Overlap = Overlap.SKIP
    start: Annotated[CueIds, Field(min_length=1)] = Field(default_factory=list)  # default: 1st
    defaults: CueDefaults = Field(default_factory=CueDefaults)
    conflict_strategy: ConflictStrategy = ConflictStrategy.PRIORITY
    arbitration_timeout_s: Timeout = 30.0
    specialists: dict[AgentId, Contract] = Field(default_factory=dict)
    cues: Annotated[list[Cue], Field(min_length=1, max_length=MAX_CUES)]
    budget: Budget | None = None  # per run

    @model_validator(mode="before")
    @classmethod
    def _merge_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        cues = data.get("cues")
        if not isinstance(cues, list):
            return data
        merged = dict(data)
        defaults = usable_defaults(data.get("defaults"))
        if defaults:
            cues = [_with_defaults(defaults, cue) if isinstance(cue, dict) else cue for cue in cues]
            merged["cues"] = cues
        if merged.get("start") is None and cues and isinstance(cues[0], dict) and "id" in cues[0]:
            merged["start"] = [cues[0]["id"]]
        return merged

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise PydanticCustomError(
                "bad_schedule", "'{value}' is not a cron expression", {"value": value}
            )
        if value is not None and next_fire(value, time.time()) is None:
            raise PydanticCustomError(
                "bad_schedule", "'{value}' never comes: no time from now on matches it",
                {"value": value},
            )  # fmt: skip
        return value

    @model_validator(mode="after")
    def _unique_ids(self) -> Cuelist:
        seen: set[str] = set()
        for cue in self.cues:
            if cue.id in seen:
                raise PydanticCustomError(
                    "duplicate_id", "cue id '{cue}' is used twice", {"cue": cue.id}
                )
            seen.add(cue.id)
        return self

    @property
    def claims_resources(self) -> bool:
        """Does some cue claim a resource? (Its runs live in the resource partition.)"""
        return any(cue.resources for cue in self.cues)

    def raisers(self) -> dict[str, list[str]]:
        """Each flag some cue raises -> the ids of the cues that raise it, in order."""
        found: dict[str, list[str]] = {}
        for cue in self.cues:
            for flag in cue.raises:
                found.setdefault(flag, []).append(cue.id)
        return found

    def cue(self, cue_id: str) -> Cue:
        """The cue with this id; KeyError when there is none."""
        for cue in self.cues:
            if cue.id == cue_id:
                return cue
        raise KeyError(cue_id)


def _with_defaults(defaults: dict[str, Any], cue: dict[str, Any]) -> dict[str, Any]:
    """The cue with the defaults it does not set; a cue's `target` replaces the default
    `target_agents` (they are two ways of saying one thing)."""
    if "target" in cue:
        defaults = {k: v for k, v in defaults.items() if k != "target_agents"}
    return {**defaults, **cue}


def usable_defaults(raw: Any) -> dict[str, Any]:
    """The entries of a raw `defaults:` mapping that are valid, to merge into each cue
    (invalid ones are reported once, at `defaults`, not again in every cue)."""
    if not isinstance(raw, dict) or not raw:
        return {}
    try:
        CueDefaults.model_validate(raw)
        bad: set[Any] = set()
    except ValidationError as exc:
        bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
    return {
        k: v
        for k, v in raw.items()
        if k in CueDefaults.model_fields and k not in bad and v is not None
    }
