"""Every state and enumerated word of the run model, spelled once."""

from __future__ import annotations

from enum import StrEnum


class CueState(StrEnum):
    PENDING = "pending"
    WAITING = "waiting"
    ARMED = "armed"
    WARNING = "warning"
    STANDBY = "standby"
    GO = "go"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"

    @property
    def done(self) -> bool:
        return self in _CUE_DONE


_CUE_DONE = frozenset({CueState.COMPLETED, CueState.FAILED, CueState.BLOCKED, CueState.CANCELLED})


class TargetState(StrEnum):
    """Where one target agent stands within the current attempt of a cue."""

    IDLE = "idle"
    WARNED = "warned"
    PREPARED = "prepared"  # ack.warning in
    READY = "ready"  # ack.standby in
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    STOOD_DOWN = "stood_down"


class RunStatus(StrEnum):
    RUNNING = "running"
    HOLDING = "holding"
    SUCCESS = "success"
    PARTIAL = "partial"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DRY = "dry"

    @property
    def done(self) -> bool:
        return self not in (RunStatus.RUNNING, RunStatus.HOLDING)


class FiredBy(StrEnum):
    RUN_START = "run-start"
    AUTO_FOLLOW = "auto-follow"
    DEPENDENCIES = "dependencies"
    OPERATOR = "operator"


class Severity(StrEnum):
    LOW = "low"  # recorded
    MEDIUM = "medium"  # operator queue
    HIGH = "high"  # queue + broadcast notice
    CRITICAL = "critical"  # also pauses new GOs


class ConflictStrategy(StrEnum):
    PRIORITY = "priority"
    FCFS = "fcfs"
    ARBITRATION = "arbitration"


class ConflictType(StrEnum):
    RESOURCE = "resource"
    TIMING = "timing"
    OUTPUT = "output"


class OnFailure(StrEnum):
    BLOCK = "block"
    CONTINUE = "continue"


class Coordination(StrEnum):
    CUED = "cued"
    DIRECT = "direct"


class Overlap(StrEnum):
    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW = "allow"


class Phase(StrEnum):
    """The phase a deadline or an ack belongs to."""

    WARNING = "warning"
    STANDBY = "standby"
    GO = "go"
