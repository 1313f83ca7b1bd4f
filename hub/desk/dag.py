"""The cue graph as a picture: a layered layout (one column per topological generation) that
templates/_dag.html draws as SVG, with nodes in the run's states and resource holders marked.

Edges are the graph module's: `auto_follow` (drawn solid: the predecessor fires it) and
`depends_on` (dashed: it waits for it). Within a column cues keep declaration order, then
one barycentre sweep moves each next to its predecessors to cut crossings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hub.engine.state import CueRun
from protocols.cuelist import Cuelist
from protocols.graph import CueGraph
from protocols.recent import Recent

NODE_W, NODE_H = 168, 50
GAP_X, GAP_Y = 64, 22
PAD = 16
BADGE_H = 16  # the resource badge above a node


@dataclass(frozen=True, slots=True)
class Node:
    cue: str
    x: int
    y: int
    description: str
    resources: tuple[str, ...]
    manual: bool


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    kind: str  # "follow" (auto_follow) or "dep" (depends_on)
    path: str  # the SVG path data


@dataclass(frozen=True, slots=True)
class Layout:
    """Where every cue and edge of one cuelist version goes (computed once per version)."""

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int


@dataclass(slots=True)
class NodeView:
    """A node as drawn for one run (or for the cuelist alone, with no state)."""

    node: Node
    state: str | None = None
    reason: str | None = None
    holds: tuple[str, ...] = ()


@dataclass(slots=True)
class Picture:
    layout: Layout
    nodes: list[NodeView] = field(default_factory=list)


def _order(graph: CueGraph, generations: list[tuple[str, ...]]) -> list[list[str]]:
    """Columns of cue ids, each sorted by the mean row of its predecessors (barycentre)."""
    row: dict[str, float] = {}
    columns: list[list[str]] = []
    for generation in generations:
        column = list(generation)

        def key(cue: str) -> tuple[float, int]:
            before = [row[p] for p in graph.predecessors(cue) if p in row]
            return (sum(before) / len(before) if before else graph.index(cue), graph.index(cue))

        if columns:
            column.sort(key=key)
        for i, cue in enumerate(column):
            row[cue] = i
        columns.append(column)
    return columns


def _path(a: Node, b: Node) -> str:
    """A cubic curve from the right side of `a` to the left side of `b`."""
    x1, y1 = a.x + NODE_W, a.y + NODE_H // 2
    x2, y2 = b.x, b.y + NODE_H // 2
    bend = max(24, (x2 - x1) // 2)
    return f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"


def layout(cuelist: Cuelist) -> Layout:
    graph = CueGraph.from_cuelist(cuelist)
    columns = _order(graph, graph.generations())
    by_id = {cue.id: cue for cue in cuelist.cues}
    nodes: dict[str, Node] = {}
    for col, column in enumerate(columns):
        for row, cue_id in enumerate(column):
            cue = by_id[cue_id]
            nodes[cue_id] = Node(
                cue=cue_id, x=PAD + col * (NODE_W + GAP_X),
                y=PAD + BADGE_H + row * (NODE_H + GAP_Y + BADGE_H),
                description=cue.description, resources=tuple(cue.resources), manual=cue.manual,
            )  # fmt: skip
    edges: list[Edge] = []
    follows = {(cue.id, cue.auto_follow) for cue in cuelist.cues if cue.auto_follow}
    for source, target in follows:
        edges.append(Edge(source, target, "follow", _path(nodes[source], nodes[target])))
    for cue in cuelist.cues:
        for dep in cue.depends_on:
            if (dep, cue.id) not in follows:  # one line per pair; auto-follow says more
                edges.append(Edge(dep, cue.id, "dep", _path(nodes[dep], nodes[cue.id])))
    edges.sort(key=lambda e: (graph.index(e.source), graph.index(e.target)))
    rows = max((len(c) for c in columns), default=1)
    return Layout(
        nodes=tuple(nodes[c] for column in columns for c in column),
        edges=tuple(edges),
        width=2 * PAD + len(columns) * NODE_W + max(0, len(columns) - 1) * GAP_X,
        height=2 * PAD + rows * (NODE_H + GAP_Y + BADGE_H) - GAP_Y,
    )


CACHED_LAYOUTS = 64
_LAYOUTS: Recent[tuple[str, str], Layout] = Recent(CACHED_LAYOUTS)


def cached_layout(name: str, version: str, cuelist: Cuelist) -> Layout:
    """A version never changes, so its layout is computed once (the most recent 64 kept)."""
    key = (name, version)
    found = _LAYOUTS.get(key)
    if found is None:
        found = _LAYOUTS.put(key, layout(cuelist))
    return found


def picture(
    name: str, version: str, cuelist: Cuelist, cues: Mapping[str, CueRun] | None
) -> Picture:
    """The layout of this version with each node in its run's state (none for a cuelist)."""
    shape = cached_layout(name, version, cuelist)
    views = []
    for node in shape.nodes:
        cr = cues.get(node.cue) if cues is not None else None
        if cr is None:
            views.append(NodeView(node))
        else:
            views.append(NodeView(node, cr.state.value, cr.reason, tuple(cr.holds)))
    return Picture(shape, views)
