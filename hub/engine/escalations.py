"""Escalations: severity routing and dedup (the first claims the slot, others count)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from protocols.ids import new_id
from protocols.messages import HUB, MessageType
from protocols.payloads import ASKS_INPUT
from protocols.states import Severity

OPEN = "open"
RECORDED = "recorded"  # low severity: kept, not queued
RESOLVED = "resolved"


Slot = tuple[str | None, str | None, str]  # an escalation's dedup slot: (run, cue, cause)

# What a specialist's escalation keeps of what it sent (it is stored, listed, and a high
# one announced to every replica): its detail, each other string, each list
DETAIL_CHARS = 2_000
TEXT_CHARS = 500
ITEMS_MAX = 20


def clipped(value: Any) -> Any:
    """`value` (a payload as JSON) with each string cut to TEXT_CHARS and each list to
    ITEMS_MAX items, all the way down."""
    if isinstance(value, str):
        return value[:TEXT_CHARS]
    if isinstance(value, list):
        return [clipped(item) for item in value[:ITEMS_MAX]]
    if isinstance(value, dict):
        return {key: clipped(item) for key, item in value.items()}
    return value


class Escalation(BaseModel):
    id: str = Field(default_factory=new_id)
    type: MessageType
    severity: Severity
    run_id: str | None = None
    cue_id: str | None = None
    cause: str
    detail: str = ""
    payload: dict[str, Any] = Field(default_factory=dict)
    raised_by: str = HUB  # or the agent that raised it, or "operator"
    status: str = OPEN
    count: int = 1
    created_at: float
    updated_at: float
    resolution: dict[str, Any] | None = None

    @property
    def slot(self) -> Slot:
        return (self.run_id, self.cue_id, self.cause)

    @property
    def asks(self) -> bool:
        """Whether this is a specialist's question about one of its cues (its slot is
        freed once answered: hub.engine.answers)."""
        cause = str(self.payload.get("cause") or self.cause)
        return self.raised_by != HUB and cause.startswith(ASKS_INPUT) and self.cue_id is not None


class EscalationBook:
    """Open escalations by id and by dedup slot (run, cue, cause)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Escalation] = {}
        self.by_slot: dict[Slot, str] = {}

    def raise_(self, esc: Escalation) -> tuple[Escalation, bool]:
        """Record `esc`; returns (the slot's escalation, whether it is new)."""
        existing_id = self.by_slot.get(esc.slot)
        if existing_id is not None and existing_id in self.by_id:
            first = self.by_id[existing_id]
            first.count += 1
            first.updated_at = esc.updated_at
            return first, False
        if esc.severity is Severity.LOW:
            esc.status = RECORDED
        self.by_id[esc.id] = esc
        self.by_slot[esc.slot] = esc.id
        return esc, True

    def take_in(self, esc: Escalation) -> None:
        """Hold an escalation read from the store (a term's start, or one resolved that
        was too old for it), its slot kept by the first that claimed it; an answered
        question's slot stays free (the next question is asked anew)."""
        self.by_id[esc.id] = esc
        if not (esc.asks and esc.status == RESOLVED):
            self.by_slot.setdefault(esc.slot, esc.id)

    def in_slot(self, slot: Slot) -> Escalation | None:
        """The escalation that holds this dedup slot, if one does."""
        esc_id = self.by_slot.get(slot)
        return self.by_id.get(esc_id) if esc_id is not None else None

    def get(self, esc_id: str) -> Escalation | None:
        return self.by_id.get(esc_id)

    def free_slot(self, esc: Escalation, *, forget: bool = False) -> None:
        """The next escalation of `esc`'s slot is raised anew, not counted on `esc`;
        `forget`: `esc` leaves memory too (the store keeps its record)."""
        self.by_slot.pop(esc.slot, None)
        if forget:
            self.by_id.pop(esc.id, None)

    def forget_run(self, run_id: str) -> None:
        """Drop a finished run's escalations from memory (the store keeps the records):
        those holding a slot and those that no longer do (an answered question's was freed;
        before, such questions stayed in memory for as long as the hub led)."""
        for slot in [s for s in self.by_slot if s[0] == run_id]:
            self.by_id.pop(self.by_slot.pop(slot), None)
        for esc_id in [i for i, esc in self.by_id.items() if esc.run_id == run_id]:
            del self.by_id[esc_id]
