"""Prometheus metrics of one hub process (served at /metrics)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

COUNTER_LABELS_MAX = 100  # named usage counters given a label of their own; then "other"


class Metrics:
    """One registry per hub, so tests can run several hubs in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.routed = Counter(
            "callboard_messages_routed", "Messages routed by the hub", ["type"], registry=r
        )
        self.dead_letters = Counter(
            "callboard_dead_letters",
            "Entries moved to the dead-letter stream",
            ["reason"],
            registry=r,
        )
        self.dead_letters_over_budget = Counter(
            "callboard_dead_letters_over_budget",
            "Entries not copied to the dead-letter stream: their sender spent its budget",
            ["reason"],
            registry=r,
        )
        self.dead_letters_over_share = Counter(
            "callboard_dead_letters_over_share",
            "Entries not copied to the dead-letter stream: their sender holds its share of it",
            ["reason"],
            registry=r,
        )
        self.violations = Counter(
            "callboard_protocol_violations", "Protocol violations seen", ["cause"], registry=r
        )
        self.escalations = Counter(
            "callboard_escalations",
            "Escalations raised (deduplicated)",
            ["type", "severity"],
            registry=r,
        )
        self.phase = Histogram(
            "callboard_cue_phase_seconds", "Time a cue spent in each phase", ["phase"], registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )  # fmt: skip
        self.runs = Counter("callboard_runs", "Runs finished", ["status"], registry=r)
        self.late_replies = Counter(
            "callboard_late_replies",
            "Acks and status for an attempt or a run that had already ended (not escalated)",
            registry=r,
        )
        self.leader = Gauge(
            "callboard_leader", "Engine partitions this hub leads (1 or 0 with one)", registry=r
        )
        self.active_runs = Gauge(
            "callboard_active_runs", "Runs in memory on the leader", registry=r
        )
        self.event_streams = Gauge(
            "callboard_event_streams", "Run event streams (SSE) this hub serves now", registry=r
        )
        # usage reported against run budgets: by agent (never by run: unbounded)
        self.usage_tokens = Counter(
            "callboard_usage_tokens", "Tokens specialists reported spending", ["agent"],
            registry=r,
        )  # fmt: skip
        self.usage_cost = Counter(
            "callboard_usage_cost", "Cost specialists reported spending", ["agent"], registry=r
        )
        self.usage_counters = Counter(
            "callboard_usage_counter", "Named counters specialists reported (the first "
            f"{COUNTER_LABELS_MAX} names seen; the rest as `other`)", ["counter"], registry=r,
        )  # fmt: skip
        self._counter_names: set[str] = set()
        self._phases: dict[str, Any] = {}  # phase -> its child of `phase` (a few: Phase)

    def phase_took(self, phase: str, seconds: float) -> None:
        """A cue spent `seconds` in `phase`: observed on the phase's child, kept (finding
        it by its label costs what the observation does, and a hub observes every cue)."""
        child = self._phases.get(phase)
        if child is None:
            child = self._phases[phase] = self.phase.labels(phase)
        child.observe(seconds)

    def usage(self, event: dict[str, Any]) -> None:
        """Count a `usage` event of a run (what one agent reported for one cue)."""
        agent = str(event.get("agent", ""))
        if event.get("tokens"):
            self.usage_tokens.labels(agent).inc(event["tokens"])
        if event.get("cost"):
            self.usage_cost.labels(agent).inc(event["cost"])
        for name, n in (event.get("counters") or {}).items():
            if name not in self._counter_names and len(self._counter_names) < COUNTER_LABELS_MAX:
                self._counter_names.add(name)
            self.usage_counters.labels(name if name in self._counter_names else "other").inc(n)


def _cause_label(cause: str) -> str:
    """Bound label cardinality: `unknown_run:abc` -> `unknown_run`."""
    return cause.split(":", 1)[0][:40]


__all__ = ["Metrics", "_cause_label"]
