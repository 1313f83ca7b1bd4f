"""What one engine step produced: messages, events, escalations, context writes, timers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hub.engine.escalations import Escalation
from protocols.codec import Envelope

ARBITRATION = "arbitration"  # timer kinds besides the three phases
DEBUG = "debug"  # a debugger's diagnosis is due (hub.engine.debugging)


@dataclass(frozen=True, order=True)
class Timer:
    at: float
    run_id: str
    cue_id: str
    attempt: int
    kind: str  # a Phase value, ARBITRATION or DEBUG


@dataclass
class Outbox:
    messages: list[tuple[str, Envelope]] = field(default_factory=list)  # (stream, message)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (run_id, event)
    # (run id, cue id) -> index in `events` of the cue's last event in this write
    last_cue_event: dict[tuple[str, str], int] = field(default_factory=dict)
    escalations: dict[str, Escalation] = field(default_factory=dict)
    context: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    owners: list[tuple[str, str]] = field(default_factory=list)  # (run id, context key) owned
    # (run id, receiver) whose pending handoff context was held or given (hub.store.layout)
    handoffs: set[tuple[str, str]] = field(default_factory=set)
    dirty: set[str] = field(default_factory=set)  # run ids whose header changed
    dirty_cues: set[tuple[str, str]] = field(default_factory=set)  # (run id, cue id) changed
    fresh: set[str] = field(default_factory=set)  # runs whose whole layout must be written
    started: set[str] = field(default_factory=set)  # runs made by this write's steps (new)
    finished: set[str] = field(default_factory=set)
    reopened: set[str] = field(default_factory=set)  # ended runs running again: keep them
    timers: list[Timer] = field(default_factory=list)
    raw: list[list[Any]] = field(default_factory=list)  # e.g. the router's XACKs, last
    # id(message) -> the traceparent it is written with (hub.tracing, when tracing is on)
    traceparents: dict[int, str] = field(default_factory=dict)
    resources_changed: bool = False
    paused_changed: bool = False
    late: int = 0  # late replies seen (counted in /metrics; never escalated)

    def quiet(self) -> bool:
        """Nothing to send and no deadline to set: state, events and raw ops only."""
        return not (
            self.messages or self.escalations or self.context or self.timers or self.finished
            or self.fresh or self.reopened or self.resources_changed or self.paused_changed
        )  # fmt: skip

    def __bool__(self) -> bool:
        return bool(
            self.messages or self.events or self.escalations or self.context or self.dirty
            or self.timers or self.raw or self.resources_changed or self.paused_changed
        )  # fmt: skip
