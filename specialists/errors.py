"""How a specialist's handler steers delivery: `Retry` later, or `Reject` the input as poison.

    SpecialistSignal
    ├── Retry     leave the entry unacknowledged and handle it again after `delay_s`;
    │             after `max_deliveries` tries it fails and goes to the dead letters
    └── Reject    never retry: dead-letter the entry with `reason` (and fail the cue)

Any other exception from `execute` reports `status.failed` with the error and acks the entry.
"""

from __future__ import annotations


class SpecialistSignal(Exception):
    """Base of the control-flow exceptions a handler may raise."""


class Retry(SpecialistSignal):
    """Handle this entry again after `delay_s` seconds (dramatiq `Retry`, arq `Retry(defer=)`)."""

    def __init__(self, delay_s: float = 1.0, reason: str = "") -> None:
        super().__init__(reason or f"retry in {delay_s}s")
        self.delay_s = max(0.0, float(delay_s))
        self.reason = reason


class Reject(SpecialistSignal):
    """The input is poison: dead-letter it with `reason` at once, never retry."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
