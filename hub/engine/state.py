"""The persisted state of a run and its cues: plain models, serialised as JSON documents."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import to_json

from protocols.cuelist import Budget
from protocols.payloads import Usage
from protocols.states import CueState, FiredBy, Phase, RunStatus, TargetState

QUEUED = "queued: the run is starting"  # shown as the reason of a cue not yet evaluated
RESULT_BYTES = 4_096  # of one target's result kept on its cue (as JSON)
RESULT_CUE_BYTES = 32_768  # of all the results kept on one cue
RESULT_HEAD_BYTES = 512  # what is kept of a result over its bound
USAGE_IDS_KEPT = 32  # context writes reporting usage remembered per cue (see usage_ids)
FAILED_ON_KEPT = 64  # agents a cue failed on, remembered for its reassigns
COMPLETIONS_KEPT = 256  # completions whose usage counted, remembered per cue (see below)
MESSAGE_IDS_KEPT = 32  # messages counted against `messages` remembered per cue (message_ids)


class Plain(BaseModel):
    """A model whose fields the engine sets a score of times a cue: plain fields (no
    validation on assignment, no private attributes, and nothing asks which fields were
    set), so a field is set as any attribute is, without pydantic's dispatch per field (half
    the time). mypy --strict keeps a misspelt name from adding an attribute."""

    __setattr__ = object.__setattr__


class CueRun(Plain):
    """One cue within one run."""

    state: CueState = CueState.PENDING
    reason: str | None = None
    attempt: int = 0  # bumped on every call (WARNING); retries_used counts failures only
    retries_used: int = 0
    fired_by: FiredBy | None = None
    fired_seq: int | None = None  # 1 for the run's first cue to fire, 2 for the next...
    go_by: FiredBy | None = None  # who fired the GO of the current attempt
    early: bool = False  # warned while a predecessor was still running
    warned_at: float | None = None
    standby_at: float | None = None
    go_at: float | None = None
    completed_at: float | None = None
    deadline: float | None = None  # epoch seconds; rebuilt into timers after a restart
    deadline_phase: Phase | None = None
    targets: dict[str, TargetState] = Field(default_factory=dict)
    not_ready: dict[str, str] = Field(default_factory=dict)  # agent -> why not ready
    holds: list[str] = Field(default_factory=list)  # resources this cue holds
    handoff_ok: bool = False
    go_context: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] = Field(default_factory=dict)  # target -> what it returned
    error: str | None = None
    gos: list[dict[str, Any]] = Field(default_factory=list)  # one recorded event per attempt
    # target -> the dead letter its refused reply became, this attempt (see guard)
    dead_replies: dict[str, str] = Field(default_factory=dict)
    # on_repeated_failure (hub.engine.debugging): the failed attempts in a row (the last
    # STREAK_KEPT, as protocols.debugging.FailedAttempt), how often a debugger was asked,
    # the one asked now and until when, and what its decisions changed
    failures_in_row: int = 0
    streak: list[dict[str, Any]] = Field(default_factory=list)
    failed_on: list[str] = Field(default_factory=list)  # agents an attempt failed on, every
    # streak's (the last FAILED_ON_KEPT): a reassign is never offered them
    consults: int = 0
    debugger: str | None = None
    debug_deadline: float | None = None
    assigned: list[str] | None = None  # targets a `reassign` chose (else the cue's own)
    action_update: dict[str, Any] = Field(default_factory=dict)  # what a `retry` changed
    decisions: list[dict[str, Any]] = Field(default_factory=list)  # one per consultation
    usage: Usage | None = None  # what its targets reported spending, over every attempt
    # "agent message-id" of the context writes whose usage counted (the last USAGE_IDS_KEPT):
    # a copy read again by a leader that never saw the first is not counted twice
    usage_ids: list[str] = Field(default_factory=list)
    # "agent completed N" of the completions whose usage counted (the last COMPLETIONS_KEPT,
    # a window of their own: with the context writes', 32 of those pushed a completion out,
    # and a copy of it read later counted again)
    completions: list[str] = Field(default_factory=list)
    # "agent message-id" of the messages its targets sent that counted against the run's
    # `messages` (the last MESSAGE_IDS_KEPT): a copy read again counts once (see budgets)
    message_ids: list[str] = Field(default_factory=list)
    # a cue with a `target:` (by capability): its spec, the agents it resolved to for the
    # current attempt, those of earlier attempts, and the trigger to fire with once enough
    # matching agents are online (set while it waits for them)
    target: dict[str, Any] | None = None
    resolved: list[str] = Field(default_factory=list)
    past_targets: list[str] = Field(default_factory=list)
    awaiting: FiredBy | None = None
    # the JSON bytes of what `result` keeps, all targets together (keep_result's total: a
    # cue of N targets would otherwise measure every other target's result at each one's
    # completion, N^2 encodings an attempt)
    result_bytes: int = 0

    def keep_result(self, agent: str, value: Any) -> None:
        """Keep what `agent` returned (`Result(result=...)`) on the cue, bounded: it rides in
        the run's hash and its completion event. A result over RESULT_BYTES, or past
        RESULT_CUE_BYTES for the whole cue, is kept as its size and its first bytes."""
        raw = to_json(value, fallback=str)
        if self.result and not self.result_bytes:  # kept by a hub before the total was
            self.result_bytes = sum(len(to_json(v, fallback=str)) for v in self.result.values())
        others = self.result_bytes
        if agent in self.result:
            others -= len(to_json(self.result[agent], fallback=str))
        if len(raw) > RESULT_BYTES or others + len(raw) > RESULT_CUE_BYTES:
            head = raw[:RESULT_HEAD_BYTES].decode("utf-8", errors="replace")
            value = {"truncated": True, "bytes": len(raw), "head": head}
            raw = to_json(value, fallback=str)
        self.result[agent] = value
        self.result_bytes = others + len(raw)

    def clear_results(self) -> None:
        """A new attempt: none of its targets' results yet."""
        self.result, self.result_bytes = {}, 0


RECORD_LIST_MAX = 20  # a run record keeps the first N errors (waits, conflicts...) and a count


class RunRecord(Plain):
    """The run record (timings, messages, escalations, errors), kept as the run goes. Its
    lists keep their first RECORD_LIST_MAX items and count the rest: the header is rewritten
    on every step of the run, so it must not grow with what anyone sends."""

    messages_in: int = 0
    messages_out: int = 0
    escalations: list[str] = Field(default_factory=list)  # escalation ids
    errors: list[str] = Field(default_factory=list)
    protocol_violations: int = 0
    late_replies: int = 0  # acks and status for an attempt (or the run) already ended
    waits: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    # how many of each there were in all (the lists stop at RECORD_LIST_MAX)
    totals: dict[str, int] = Field(default_factory=dict)

    def note(self, name: str, text: str) -> None:
        """Add to list `name` (errors, waits, conflicts, escalations) and count it."""
        items: list[str] = getattr(self, name)
        self.totals[name] = max(self.totals.get(name, len(items)), len(items)) + 1
        if len(items) < RECORD_LIST_MAX:
            items.append(text[:1000])


class RunState(Plain):
    run_id: str
    cuelist: str
    version: str
    status: RunStatus = RunStatus.RUNNING
    dry: bool = False
    params: dict[str, Any] = Field(default_factory=dict)
    created_at: float
    started_at: float | None = None
    completed_at: float | None = None
    hold_reason: str | None = None
    rerun_of: str | None = None  # the run this one reruns
    reruns: list[str] = Field(default_factory=list)  # runs that rerun this one, newest last
    conditions: list[str] = Field(default_factory=list)
    cues: dict[str, CueRun] = Field(default_factory=dict)  # stored one hash field per cue
    fired_count: int = 0
    handoffs: dict[str, dict[str, Any]] = Field(default_factory=dict)  # receiver -> context
    record: RunRecord = Field(default_factory=RunRecord)
    budget: Budget | None = None  # the run's limits (the cuelist's, merged with the run's)
    usage: Usage = Field(default_factory=Usage)  # reported by its specialists, in all
    budget_warned: list[str] = Field(default_factory=list)  # "tokens@50000": escalated once
    # context key -> the agent that wrote it first (stored one hash field each, not in the
    # header: see hub.store.layout)
    context_owners: dict[str, str] = Field(default_factory=dict)

    def fired(self) -> list[str]:
        """Cue ids in the order they first fired."""
        seqs = {cue_id: cr.fired_seq for cue_id, cr in self.cues.items() if cr.fired_seq}
        return sorted(seqs, key=seqs.__getitem__)

    def messages(self) -> int:
        """Messages counted against the `messages` budget: those the hub sent to the run's
        specialists (one per recipient) and those it took from them for the run."""
        return self.record.messages_in + self.record.messages_out

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for cue in self.cues.values():
            out[cue.state.value] = out.get(cue.state.value, 0) + 1
        return out
