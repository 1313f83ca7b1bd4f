"""The cue graph's layout: one column per topological generation, auto-follow and
depends_on edges told apart, no two nodes on one spot, states and holders per run."""

from __future__ import annotations

from pathlib import Path

from hub.desk import dag
from hub.engine.state import CueRun
from protocols.states import CueState
from protocols.validation import load_cuelist

ROOT = Path(__file__).resolve().parents[3]
CHAIN = """
cuelist: shapes
cues:
  - {id: A, target_agents: [x], auto_follow: B}
  - {id: B, target_agents: [x], resources: [runner]}
  - {id: C, target_agents: [x], depends_on: [A]}
  - {id: D, target_agents: [x], depends_on: [B, C]}
"""


def test_columns_follow_topological_generations() -> None:
    cuelist, _ = load_cuelist(CHAIN)
    shape = dag.layout(cuelist)
    x = {n.cue: n.x for n in shape.nodes}
    assert x["A"] < x["B"] == x["C"] < x["D"]
    spots = {(n.x, n.y) for n in shape.nodes}
    assert len(spots) == len(shape.nodes)
    for n in shape.nodes:
        assert n.x >= 0 and n.x + dag.NODE_W <= shape.width
        assert n.y >= 0 and n.y + dag.NODE_H <= shape.height


def test_edges_say_which_kind_they_are() -> None:
    cuelist, _ = load_cuelist(CHAIN)
    kinds = {(e.source, e.target): e.kind for e in dag.layout(cuelist).edges}
    assert kinds == {("A", "B"): "follow", ("A", "C"): "dep", ("B", "D"): "dep", ("C", "D"): "dep"}


def test_a_run_colours_nodes_and_marks_holders() -> None:
    cuelist, version = load_cuelist(CHAIN)
    cues = {c.id: CueRun() for c in cuelist.cues}
    cues["B"] = CueRun(state=CueState.GO, holds=["runner"])
    picture = dag.picture("shapes", version, cuelist, cues)
    by_cue = {v.node.cue: v for v in picture.nodes}
    assert by_cue["B"].state == "go" and by_cue["B"].holds == ("runner",)
    assert by_cue["A"].state == "pending" and by_cue["A"].holds == ()
    assert dag.picture("shapes", version, cuelist, None).nodes[0].state is None
    assert dag.cached_layout("shapes", version, cuelist) is picture.layout  # once per version


def test_every_example_lays_out() -> None:
    for path in sorted((ROOT / "cuelists").glob("*.yaml")):
        cuelist, _ = load_cuelist(path.read_text())
        shape = dag.layout(cuelist)
        assert len(shape.nodes) == len(cuelist.cues), path.name
