"""What a debugger specialist is sent after a cue's repeated failure, and what it answers.

The hub sends the debugger a `task.assign` whose `action` holds one key, `debug`: a
FailureHistory. The debugger completes with `status.completed` whose `result` is a
Diagnosis; the hub writes the diagnosis to the run's context (attributed to the debugger)
and applies its decision (PROTOCOL.md, "A debugger after repeated failure").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from protocols.keys import AGENT_ID_PATTERN

DEBUG_KEY = "debug"  # the task.assign action key that holds the FailureHistory
DIAGNOSIS_TAG = "diagnosis"  # the tag of the context entry a diagnosis becomes
ERROR_CHARS = 2_000  # of each attempt's error, in the history


def diagnosis_key(cue_id: str) -> str:
    """The context key a cue's diagnosis is written under."""
    return f"diagnosis.{cue_id}"


class Decision(StrEnum):
    RETRY = "retry"  # try again, with the allowed action keys changed as `action` says
    REASSIGN = "reassign"  # try again on `to` (or a candidate the hub picks)
    ABANDON = "abandon"  # the cue fails: the debugger's diagnosis is its error


class FailedAttempt(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int
    error: str
    targets: list[str]  # who the attempt went to
    at: float  # epoch seconds


class FailureHistory(BaseModel):
    """The streak of failed attempts a debugger is asked about (`action.debug`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    cuelist: str
    cue_id: str
    description: str = ""
    targets: list[str]  # the cue's targets now
    action: dict[str, Any] = Field(default_factory=dict)  # the action they were sent
    allow: list[str] = Field(default_factory=list)  # action keys a retry may change
    attempts: list[FailedAttempt]  # oldest first
    context: dict[str, Any] = Field(default_factory=dict)  # what the last GO carried
    dead_letters: dict[str, str] = Field(default_factory=dict)  # agent -> its refused reply
    candidates: list[str] = Field(default_factory=list)  # online, same capabilities
    consult: int = 1  # this is the cue's n-th consultation


class Diagnosis(BaseModel):
    """A debugger's answer (`status.completed` result)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Decision
    diagnosis: Annotated[str, StringConstraints(max_length=4_000)]
    action: dict[str, Any] = Field(default_factory=dict)  # retry: new values of allowed keys
    to: Annotated[str, StringConstraints(pattern=AGENT_ID_PATTERN)] | None = None  # reassign
    details: dict[str, Any] = Field(default_factory=dict)  # anything else, kept in context
