"""Static conflicts: cues that may run at the same time and share a resource or an output.

Cues are grouped by resource and by output first; within a group, whether two cues may
overlap is read from ancestor bitsets built in one topological pass, so even one
resource shared by 10,000 cues costs a few big-integer operations per cue, not a
search per pair.
"""

from __future__ import annotations

from collections import defaultdict

from protocols.cuelist import Cuelist
from protocols.graph import CueGraph
from protocols.issues import Issue, IssueSeverity

MAX_PAIRS_REPORTED = 10  # per resource or output; the rest are counted in one more issue


def find_conflicts(cuelist: Cuelist, graph: CueGraph, *, strict: bool = False) -> list[Issue]:
    """One issue per pair of cues that may overlap on a resource (`resource_conflict`) or an
    output (`output_conflict`); warnings, or errors when `strict`."""
    severity: IssueSeverity = "error" if strict else "warning"
    resources: dict[str, list[str]] = defaultdict(list)
    outputs: dict[str, list[str]] = defaultdict(list)
    for cue in cuelist.cues:
        for name in cue.resources:
            resources[name].append(cue.id)
        for name in cue.outputs:
            outputs[name].append(cue.id)
    shared = {k: v for k, v in resources.items() if len(v) > 1}
    written = {k: v for k, v in outputs.items() if len(v) > 1}
    if not shared and not written:
        return []
    members = {cue for group in (*shared.values(), *written.values()) for cue in group}
    order = [cue for cue in graph.topological_order() if cue in members]
    bit = {cue: 1 << i for i, cue in enumerate(order)}
    ancestors = _ancestor_bits(graph, bit)
    issues: list[Issue] = []
    for kind, groups, verb in (
        ("resource", shared, "both use resource"),
        ("output", written, "both write output"),
    ):
        for name, cues in groups.items():
            pairs, total, unreported = _overlapping(cues, bit, order, ancestors)
            for first, second in pairs:
                message = f"cues {first} and {second} may run at the same time and {verb} '{name}'"
                issues.append(_issue(kind, severity, second, message))
            if total > len(pairs):
                message = (
                    f"{total - len(pairs)} more pairs of cues may run at the same time "
                    f"and {verb} '{name}', the first of them with cue {unreported}"
                )  # placed on that cue, so that it has a line as every issue does
                issues.append(_issue(kind, severity, unreported, message))
    return issues


def _ancestor_bits(graph: CueGraph, bit: dict[str, int]) -> dict[str, int]:
    """For every cue, the bitset of member cues that must complete before it."""
    masks: dict[str, int] = {}
    preds = graph.graph.pred
    for cue in graph.topological_order():
        mask = 0
        for parent in preds[cue]:
            mask |= masks[parent] | bit.get(parent, 0)
        masks[cue] = mask
    return masks


def _overlapping(
    cues: list[str], bit: dict[str, int], order: list[str], ancestors: dict[str, int]
) -> tuple[list[tuple[str, str]], int, str | None]:
    """Up to MAX_PAIRS_REPORTED pairs (earlier, later) in topological order where the
    earlier is not an ancestor of the later, how many such pairs there are in all, and the
    later cue of the first pair left out (None when none is)."""
    group = 0
    for cue in cues:
        group |= bit[cue]
    pairs: list[tuple[str, str]] = []
    total = 0
    unreported: str | None = None
    for cue in sorted(set(cues), key=bit.__getitem__):
        earlier = group & (bit[cue] - 1) & ~ancestors[cue]
        total += earlier.bit_count()
        while earlier and len(pairs) < MAX_PAIRS_REPORTED:
            low = earlier & -earlier
            pairs.append((order[low.bit_length() - 1], cue))
            earlier ^= low
        if earlier and unreported is None:
            unreported = cue
    return pairs, total, unreported


def _issue(kind: str, severity: IssueSeverity, cue: str | None, message: str) -> Issue:
    key = "resources" if kind == "resource" else "outputs"
    return Issue(code=f"{kind}_conflict", message=message, severity=severity, cue=cue, key=key)
