"""Benchmark: load + validate generated cuelists end to end, and the cue graph at 100,000 cues.

Run `python bench/validate.py`. The baselines, measured in the same run: for validation,
PyYAML's C safe loader parsing the same text (no checks at all); for the graph, networkx
alone building the same graph and checking it for cycles (`is_directed_acyclic_graph`).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import networkx as nx
import yaml

from protocols.graph import CueGraph, CueNode
from protocols.loader import MAX_BYTES
from protocols.validation import validate_text

EDGES = 3


def deps_of(i: int, rng: random.Random) -> list[int]:
    """Up to EDGES earlier cues, so the graph is a DAG."""
    return sorted({rng.randrange(i) for _ in range(EDGES)}) if i else []


def cuelist_yaml(n: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    out = [
        f"cuelist: bench-{n}",
        "description: generated for the benchmark",
        "defaults: {target_agents: [specialist-build], go_timeout_s: 60}",
        "cues:",
    ]
    for i in range(n):
        deps = ", ".join(f"C{d}" for d in deps_of(i, rng))
        extra = f", resources: [runner-{i % 5}]" if i % 10 == 0 else ""
        out.append(f"  - {{id: C{i}, depends_on: [{deps}], action: {{execute_ms: 50}}{extra}}}")
    return "\n".join(out) + "\n"


def graph_nodes(n: int, seed: int = 2) -> list[CueNode]:
    rng = random.Random(seed)
    return [CueNode(f"C{i}", tuple(f"C{d}" for d in deps_of(i, rng))) for i in range(n)]


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if repeat < 5 else statistics.median(times)


def networkx_alone(nodes: list[CueNode]) -> None:
    graph = nx.DiGraph()
    graph.add_nodes_from(n.id for n in nodes)
    graph.add_edges_from((d, n.id) for n in nodes for d in n.depends_on)
    assert nx.is_directed_acyclic_graph(graph)


def ours(nodes: list[CueNode]) -> None:
    graph, issues = CueGraph.build(nodes, [nodes[0].id])
    assert graph is not None and not issues, issues[:3]


def main() -> int:
    rows: list[tuple[str, float, float | None]] = []
    for n in (1_000, 10_000):
        text = cuelist_yaml(n)
        size = len(text.encode())
        assert size <= MAX_BYTES, size
        report = validate_text(text)
        assert report.valid, report.errors[:3]
        seconds = best(partial(validate_text, text), 5)
        rows.append((f"validate {n:,} cues ({size / 1024:.0f} KiB YAML)", seconds, None))
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    parse_s = best(partial(yaml.load, text, Loader=loader), 3)
    rows.append(("yaml.load(CSafeLoader) alone, 10,000 cues", parse_s, None))
    rows[1] = (rows[1][0], rows[1][1], rows[1][1] / parse_s)
    nodes = graph_nodes(100_000)
    ours_s = best(lambda: ours(nodes), 3)
    base_s = best(lambda: networkx_alone(nodes), 3)
    rows.append(("networkx alone: build + DAG check, 100,000 cues", base_s, None))
    rows.append(("CueGraph.build (all checks), 100,000 cues", ours_s, ours_s / base_s))
    print(f"{'benchmark':<52} {'seconds':>8} {'vs baseline':>12}")
    for name, seconds, ratio in rows:
        shown = f"{ratio:.2f}x" if ratio is not None else ""
        print(f"{name:<52} {seconds:>8.3f} {shown:>12}")
    ok = rows[1][1] < 1.0  # 10,000 cues
    print(f"target: 10,000 cues end to end under 1 s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
