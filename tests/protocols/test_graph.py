"""The cue graph: structural errors with cycle paths, and the engine's queries."""

from __future__ import annotations

from itertools import pairwise

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import CuelistError
from protocols.graph import CueGraph, CueNode, check_graph, nodes_of
from protocols.validation import load_cuelist


def n(cue_id: str, *deps: str, follow: str | None = None) -> CueNode:
    return CueNode(cue_id, deps, follow)


def codes(nodes: list[CueNode], start: list[str] | None = None) -> list[str]:
    return [i.code for i in check_graph(nodes, start)]


def test_a_valid_graph_has_no_issues() -> None:
    assert codes([n("A", follow="B"), n("B"), n("C", "A", "B")]) == []


def test_structural_errors() -> None:
    assert codes([n("A", "A")]) == ["self_dependency"]
    assert codes([n("A", follow="A")]) == ["self_dependency"]
    assert codes([n("A"), n("B", "Z")]) == ["unknown_cue"]
    assert codes([n("A", follow="Z")]) == ["auto_follow_missing"]
    assert codes([n("A"), n("B")], ["Q"]) == ["unknown_cue"]
    assert codes([n("A", "B"), n("B")]) == ["entry_has_predecessors"]
    assert codes([n("A"), n("B", follow="A")], ["A"]) == ["entry_has_predecessors"]


def test_an_unknown_id_suggests_a_close_one() -> None:
    [issue] = check_graph([n("CUE-100"), n("CUE-200", "CUE-10")])
    assert "did you mean 'CUE-100'" in issue.message and issue.cue == "CUE-200"


def test_cycle_path_starts_at_the_first_declared_cue() -> None:
    issues = check_graph(
        [n("START"), n("CUE-100", "START"), n("CUE-200", "CUE-100", follow="CUE-100")]
    )
    [cycle] = [i for i in issues if i.code == "cycle"]
    assert cycle.message == "cycle: CUE-100 -> CUE-200 -> CUE-100"
    assert (cycle.cue, cycle.key) == ("CUE-200", "auto_follow")


def test_one_cycle_per_strongly_connected_component() -> None:
    nodes = [n("S"), n("A", "S", "B"), n("B", "A"), n("C", "S", "D"), n("D", "C")]
    assert codes(nodes) == ["cycle", "cycle"]


def graph(nodes: list[CueNode], start: list[str] | None = None) -> CueGraph:
    found, issues = CueGraph.build(nodes, start)
    assert found is not None, issues
    return found


def test_queries() -> None:
    g = graph([n("A", follow="B"), n("B"), n("C", "A"), n("D", "B", "C"), n("E")], ["A", "E"])
    assert g.entry_cues == ("A", "E")
    assert g.predecessors("D") == ("B", "C") and g.successors("A") == ("B", "C")
    assert g.ancestors("D") == {"A", "B", "C"} and g.descendants("A") == {"B", "C", "D"}
    assert g.auto_follow("A") == "B" and g.auto_follow("B") is None
    assert g.may_run_concurrently("B", "C") and g.may_run_concurrently("E", "D")
    assert not g.may_run_concurrently("A", "D") and not g.may_run_concurrently("D", "A")
    assert not g.may_run_concurrently("B", "B")
    assert g.generations() == [("A", "E"), ("B", "C"), ("D",)]
    assert g.topological_order() == ["A", "E", "B", "C", "D"]
    assert list(g) == ["A", "B", "C", "D", "E"] and len(g) == 5 and "C" in g


def test_from_cuelist() -> None:
    model, _ = load_cuelist(
        "cuelist: x\ncues:\n- {id: A, target_agents: [a], auto_follow: B}\n"
        "- {id: B, target_agents: [a]}\n"
    )
    assert CueGraph.from_cuelist(model).successors("A") == ("B",)
    assert [x.id for x in nodes_of(model)] == ["A", "B"]


def test_from_cuelist_refuses_a_cycle() -> None:
    model, _ = load_cuelist("cuelist: x\ncues:\n- {id: A, target_agents: [a]}\n")
    cyclic = model.model_copy(
        update={"cues": [model.cues[0].model_copy(update={"auto_follow": "A"})]}
    )
    with pytest.raises(CuelistError):
        CueGraph.from_cuelist(cyclic)


@st.composite
def dags(draw: st.DrawFn) -> list[CueNode]:
    """A random DAG: each cue depends on some earlier ones, some auto-follow a later one."""
    size = draw(st.integers(1, 25))
    nodes = []
    for i in range(size):
        deps = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        follow = draw(st.one_of(st.none(), st.integers(i + 1, size - 1))) if i < size - 1 else None
        nodes.append(
            CueNode(
                f"C{i}",
                tuple(f"C{d}" for d in sorted(deps)),
                None if follow is None else f"C{follow}",
            )
        )
    return nodes


def edges_of(nodes: list[CueNode]) -> set[tuple[str, str]]:
    found = {(d, x.id) for x in nodes for d in x.depends_on}
    return found | {(x.id, x.auto_follow) for x in nodes if x.auto_follow}


def entries(nodes: list[CueNode]) -> list[str]:
    has_pred = {b for _, b in edges_of(nodes)}
    return [x.id for x in nodes if x.id not in has_pred]


@settings(max_examples=150, deadline=None)
@given(dags())
def test_random_dags_always_validate(nodes: list[CueNode]) -> None:
    g = graph(nodes, entries(nodes))
    order = {cue: i for i, cue in enumerate(g.topological_order())}
    assert all(order[a] < order[b] for a, b in edges_of(nodes))


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_any_back_edge_is_a_cycle_with_a_real_path(
    nodes: list[CueNode], data: st.DataObject
) -> None:
    edges = edges_of(nodes)
    reach = nx.DiGraph(edges)
    reach.add_nodes_from(x.id for x in nodes)
    pairs = [(a, b) for a in reach for b in nx.descendants(reach, a)]
    if not pairs:
        return
    ancestor, descendant = data.draw(st.sampled_from(pairs))
    # the back edge: make the ancestor depend on its descendant
    nodes = [
        CueNode(x.id, (*x.depends_on, descendant), x.auto_follow) if x.id == ancestor else x
        for x in nodes
    ]
    cycles = [i for i in check_graph(nodes, entries(nodes) or None) if i.code == "cycle"]
    assert cycles
    all_edges = edges_of(nodes)
    for issue in cycles:
        path = issue.message.removeprefix("cycle: ").split(" -> ")
        assert path[0] == path[-1] and len(path) >= 3
        assert all(edge in all_edges for edge in pairwise(path))


def test_a_long_chain_builds_without_recursion() -> None:
    nodes = [CueNode(f"C{i}", (f"C{i - 1}",) if i else ()) for i in range(20_000)]
    g = graph(nodes)
    assert len(g.generations()) == 20_000
