"""The cue graph (networkx): edges `depends_on` (dep -> cue) and `auto_follow` (cue -> next),
its structural checks (unknown ids, self-dependencies, cycles with their path, entry cues
with predecessors), and the queries the run engine asks of it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import TYPE_CHECKING

import networkx as nx

from protocols.errors import CuelistError
from protocols.issues import Issue, error

if TYPE_CHECKING:
    from protocols.cuelist import Cuelist


@dataclass(frozen=True, slots=True)
class CueNode:
    """What the graph needs of a cue; built from a model or from raw data."""

    id: str
    depends_on: tuple[str, ...] = ()
    auto_follow: str | None = None


def raised_by_hand_only(
    cue_id: str, raisers: Iterable[str], after: Callable[[str], Collection[str]]
) -> bool:
    """Whether only an operator can raise a flag `cue_id` waits for: no cue among `raisers`
    (those that may still raise it) but the cue itself and the cues `after` it, which wait
    for it. `after(cue_id)` is asked only when some other cue raises the flag. The one rule of the
    engine's hold, the desk's approvals and validation's warnings."""
    others = set(raisers) - {cue_id}
    return not others or others <= set(after(cue_id))


def nodes_of(cuelist: Cuelist) -> list[CueNode]:
    return [CueNode(c.id, tuple(c.depends_on), c.auto_follow) for c in cuelist.cues]


class CueGraph:
    """A checked, acyclic cue graph, built once per cuelist version."""

    def __init__(
        self, graph: nx.DiGraph, index: dict[str, int], entries: tuple[str, ...],
        follows: dict[str, str], generations: list[tuple[str, ...]],
    ) -> None:  # fmt: skip
        self.graph = graph
        self._index = index
        self.entry_cues = entries
        self._follows = follows
        self._generations = generations
        self._ancestors: dict[str, frozenset[str]] = {}
        self._descendants: dict[str, frozenset[str]] = {}

    @classmethod
    def build(
        cls, nodes: Sequence[CueNode], start: Sequence[str] | None = None,
        *, start_written: bool | None = None,
    ) -> tuple[CueGraph | None, list[Issue]]:  # fmt: skip
        """Check the structure; returns the graph (None when there are errors) and the issues.
        `start_written`: whether the user wrote `start` (the model fills it in), so an error
        names the key that is in the file."""
        graph, index, issues = _structure(nodes)
        entries = tuple(start) if start else (nodes[0].id,) if nodes else ()
        written = bool(start) if start_written is None else start_written
        issues += _check_entries(graph, index, entries, nodes, explicit=written)
        try:
            generations = [
                tuple(sorted(gen, key=index.__getitem__))
                for gen in nx.topological_generations(graph)
            ]
        except nx.NetworkXUnfeasible:
            issues += _cycles(graph, index, nodes)
            return None, issues
        if issues:
            return None, issues
        follows = {n.id: n.auto_follow for n in nodes if n.auto_follow is not None}
        return cls(graph, index, entries, follows, generations), issues

    @classmethod
    def from_cuelist(cls, cuelist: Cuelist) -> CueGraph:
        """The graph of a schema-valid cuelist; raises CuelistError on structural errors."""
        found, issues = cls.build(nodes_of(cuelist), cuelist.start)
        if found is None:
            raise CuelistError(issues)
        return found

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, cue: object) -> bool:
        return cue in self._index

    def __iter__(self) -> Iterator[str]:
        """Cue ids in declaration order."""
        return iter(self._index)

    def index(self, cue: str) -> int:
        """Where the cue is declared (0 for the first)."""
        return self._index[cue]

    def generations(self) -> list[tuple[str, ...]]:
        """Topological generations: each holds cues whose predecessors are all in earlier ones."""
        return list(self._generations)

    def topological_order(self) -> list[str]:
        return [cue for generation in self._generations for cue in generation]

    def predecessors(self, cue: str) -> tuple[str, ...]:
        return tuple(sorted(self.graph.predecessors(cue), key=self._index.__getitem__))

    def successors(self, cue: str) -> tuple[str, ...]:
        return tuple(sorted(self.graph.successors(cue), key=self._index.__getitem__))

    def auto_follow(self, cue: str) -> str | None:
        """The cue this one fires when it completes."""
        return self._follows.get(cue)

    def ancestors(self, cue: str) -> frozenset[str]:
        """Every cue that must complete before this one (cached)."""
        found = self._ancestors.get(cue)
        if found is None:
            found = self._ancestors[cue] = frozenset(nx.ancestors(self.graph, cue))
        return found

    def descendants(self, cue: str) -> frozenset[str]:
        """Every cue blocked when this one fails (cached)."""
        found = self._descendants.get(cue)
        if found is None:
            found = self._descendants[cue] = frozenset(nx.descendants(self.graph, cue))
        return found

    def may_run_concurrently(self, a: str, b: str) -> bool:
        """Neither cue must wait for the other."""
        if a == b:
            return False
        return a not in self.ancestors(b) and b not in self.ancestors(a)


def check_graph(nodes: Sequence[CueNode], start: Sequence[str] | None = None) -> list[Issue]:
    return CueGraph.build(nodes, start)[1]


def _structure(nodes: Sequence[CueNode]) -> tuple[nx.DiGraph, dict[str, int], list[Issue]]:
    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        index.setdefault(node.id, i)
    issues: list[Issue] = []
    edges: list[tuple[str, str]] = []
    for node in nodes:
        cue = node.id
        for dep in node.depends_on:
            if dep == cue:
                issues.append(
                    error("self_dependency", f"{cue} depends on itself", cue=cue, key="depends_on")
                )
            elif dep in index:
                edges.append((dep, cue))
            else:
                message = f"depends_on names unknown cue '{dep}'{_hint(dep, index)}"
                issues.append(error("unknown_cue", message, cue=cue, key="depends_on"))
        nxt = node.auto_follow
        if nxt is None:
            continue
        if nxt == cue:
            message = f"{cue} auto-follows itself"
            issues.append(error("self_dependency", message, cue=cue, key="auto_follow"))
        elif nxt in index:
            edges.append((cue, nxt))
        else:
            message = f"auto_follow names unknown cue '{nxt}'{_hint(nxt, index)}"
            issues.append(error("auto_follow_missing", message, cue=cue, key="auto_follow"))
    graph = nx.DiGraph()
    graph.add_nodes_from(index)
    graph.add_edges_from(edges)
    return graph, index, issues


def _check_entries(
    graph: nx.DiGraph, index: dict[str, int], entries: Sequence[str],
    nodes: Sequence[CueNode], *, explicit: bool,
) -> list[Issue]:  # fmt: skip
    """Entry cues must have no predecessors. An error names what the user wrote: `start`
    when it was given; otherwise the edge into the first cue (its `depends_on`, or the
    `auto_follow` that leads to it), and nothing at all when that edge is part of a cycle,
    which is reported on its own."""
    issues = []
    for cue in entries:
        if cue not in index:
            message = f"start names unknown cue '{cue}'{_hint(cue, index)}"
            issues.append(error("unknown_cue", message, key="start"))
            continue
        before = sorted(graph.predecessors(cue), key=index.__getitem__)
        if not before:
            continue
        listed = ", ".join(before)
        if explicit:
            message = (
                f"entry cue {cue} has predecessors {listed}: entry cues fire when the run "
                "starts, so nothing may come before them"
            )
            issues.append(error("entry_has_predecessors", message, cue=cue, key="start"))
            continue
        if any(nx.has_path(graph, cue, p) for p in before):
            continue  # the cycle's own error says it
        message = (
            f"{cue} is the entry cue (the first cue, as there is no start:) but has "
            f"predecessors {listed}: declare an entry cue first, or list entry cues in start:"
        )
        deps = next(n.depends_on for n in nodes if n.id == cue)
        if any(p in deps for p in before):
            issues.append(error("entry_has_predecessors", message, cue=cue, key="depends_on"))
        else:
            issues.append(
                error("entry_has_predecessors", message, cue=before[0], key="auto_follow")
            )
    return issues


def _cycles(graph: nx.DiGraph, index: dict[str, int], nodes: Sequence[CueNode]) -> list[Issue]:
    """One cycle per strongly connected component, as a path that starts and ends at the
    cue declared first, e.g. `CUE-100 -> CUE-200 -> CUE-100`."""
    deps: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        deps.setdefault(node.id, node.depends_on)
    found = []
    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        first = min(component, key=index.__getitem__)
        edges = nx.find_cycle(graph.subgraph(component), source=first)
        path = [u for u, _ in edges]
        at = path.index(min(path, key=index.__getitem__))
        path = path[at:] + path[:at]
        key = "depends_on" if path[-1] in deps.get(path[0], ()) else "auto_follow"
        cue = path[0] if key == "depends_on" else path[-1]
        message = f"cycle: {' -> '.join([*path, path[0]])}"
        found.append((index[path[0]], error("cycle", message, cue=cue, key=key)))
    return [issue for _, issue in sorted(found, key=lambda pair: pair[0])]


def _hint(name: str, known: dict[str, int]) -> str:
    if len(known) > 2000:  # difflib is quadratic-ish; big lists get no hint
        return ""
    close = get_close_matches(name, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
