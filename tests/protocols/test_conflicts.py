"""Static conflicts: only cues that may overlap, grouped by resource, never pair by pair."""

from __future__ import annotations

import time
from typing import Any

from protocols.conflicts import MAX_PAIRS_REPORTED, find_conflicts
from protocols.cuelist import Cuelist
from protocols.graph import CueGraph
from protocols.issues import Issue
from protocols.validation import validate_text


def check(*cues: dict[str, Any], strict: bool = False) -> list[Issue]:
    model = Cuelist.model_validate(
        {"cuelist": "x", "defaults": {"target_agents": ["a"]}, "cues": list(cues)}
    )
    return find_conflicts(model, CueGraph.from_cuelist(model), strict=strict)


def test_parallel_cues_on_one_resource_warn() -> None:
    [issue] = check(
        {"id": "S"},
        {"id": "A", "depends_on": ["S"], "resources": ["runner"]},
        {"id": "B", "depends_on": ["S"], "resources": ["runner", "other"]},
    )
    assert (issue.code, issue.severity, issue.cue, issue.key) == (
        "resource_conflict", "warning", "B", "resources",
    )  # fmt: skip
    assert "A and B" in issue.message and "'runner'" in issue.message


def test_ordered_cues_do_not_conflict() -> None:
    assert not check(
        {"id": "A", "resources": ["runner"], "outputs": ["out.tar"], "auto_follow": "B"},
        {"id": "B", "resources": ["runner"]},
        {"id": "C", "depends_on": ["B"], "outputs": ["out.tar"]},
    )


def test_outputs_and_strict() -> None:
    [issue] = check({"id": "A", "outputs": ["o"]}, {"id": "B", "outputs": ["o"]}, strict=True)
    assert (issue.code, issue.severity) == ("output_conflict", "error")


def test_a_resource_shared_by_thousands_of_parallel_cues_is_cheap() -> None:
    cues = [{"id": "S"}] + [
        {"id": f"C{i}", "depends_on": ["S"], "resources": ["r"]} for i in range(9_999)
    ]
    started = time.perf_counter()
    issues = check(*cues)
    assert time.perf_counter() - started < 3
    assert len(issues) == MAX_PAIRS_REPORTED + 1
    assert issues[-1].message.startswith(f"{9_999 * 9_998 // 2 - MAX_PAIRS_REPORTED} more pairs")


def test_a_chain_sharing_one_resource_has_no_conflict() -> None:
    cues = [{"id": f"C{i}", "resources": ["r"], **({"depends_on": [f"C{i - 1}"]} if i else {})}
            for i in range(3_000)]  # fmt: skip
    assert check(*cues) == []


def test_the_pairs_left_out_are_an_issue_placed_on_a_cue_and_its_line() -> None:
    """Under --strict the count of the pairs past the first ten was an error with no cue
    and no line, where every other one names file, line, cue and key."""
    text = "cuelist: many\nstart: [" + ", ".join(f"C{i}" for i in range(6)) + "]\ncues:\n"
    text += "".join(
        f"  - {{id: C{i}, target_agents: [a], resources: [runner]}}\n" for i in range(6)
    )
    report = validate_text(text, "many.yaml", strict=True)
    assert len(report.errors) == MAX_PAIRS_REPORTED + 1
    left = report.errors[-1]
    assert left.message.startswith("5 more pairs") and left.cue == "C5", left
    assert (left.line, left.key) == (9, "resources")
