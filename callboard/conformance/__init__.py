"""The conformance kit: drives any specialist through PROTOCOL.md as the hub would, on a real
server, and reports each behaviour (`callboard conformance`, or `run_kit` from Python)."""

from callboard.conformance.kit import ALL_CHECKS, Report, Result, Unusable, run_kit
from callboard.conformance.stage import Timing

__all__ = ["ALL_CHECKS", "Report", "Result", "Timing", "Unusable", "run_kit"]
