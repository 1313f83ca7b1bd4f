"""The target filter language, agent labels, `target:` and choosing among matches."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from protocols.contracts import Contract
from protocols.errors import FilterError
from protocols.targeting import (
    LABELS_MAX,
    MAX_DEPTH,
    AllOf,
    AnyOf,
    Candidate,
    Check,
    FieldRef,
    Not,
    Target,
    choose,
    evaluate,
    matching,
    parse_filter,
    parse_labels,
)

GPU = Candidate("gpu-1", kind="echo", provides=("code_review", "tests"), labels={"gpu": True})
BUSY = Candidate("gpu-2", provides=("code_review",), labels={"gpu": True, "busy": True})
CPU = Candidate(
    "cpu-1", requires=("diff",), handoff_to=("gpu-1",),
    labels={"gpu": False, "zone": "eu", "mem_gb": 16, "load": 0.25},
)  # fmt: skip


def test_precedence_not_binds_tightest_then_and_then_or() -> None:
    tree = parse_filter("labels.a OR NOT labels.b AND labels.c")
    a, b, c = (Check(FieldRef(f"labels.{x}")) for x in "abc")
    assert tree == AnyOf((a, AllOf((Not(b), c))))
    assert parse_filter("(labels.a OR labels.b) AND labels.c") == AllOf((AnyOf((a, b)), c))
    assert parse_filter("labels.a and not labels.b") == AllOf((a, Not(b)))  # either case


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("labels.gpu AND NOT labels.busy", ["gpu-1"]),
        ("labels.gpu", ["gpu-1", "gpu-2"]),  # bare label: present and truthy
        ("NOT labels.gpu", ["cpu-1"]),  # false and missing are both not truthy
        ("provides == code_review", ["gpu-1", "gpu-2"]),  # == on a list: contains
        ("provides != code_review", ["cpu-1"]),
        ("code_review in provides", ["gpu-1", "gpu-2"]),
        ("'tests' in provides", ["gpu-1"]),
        ("name in [gpu-1, cpu-1]", ["cpu-1", "gpu-1"]),
        ("agent == 'gpu-2'", ["gpu-2"]),
        ("kind == echo", ["gpu-1"]),
        ("labels.zone == eu", ["cpu-1"]),
        ('labels.zone == "eu" AND labels.mem_gb >= 16', ["cpu-1"]),
        ("labels.mem_gb > 16", []),
        ("labels.mem_gb < 16.5 AND labels.load <= 0.25", ["cpu-1"]),
        ("labels.zone > 5", []),  # comparing a string with a number: false, not an error
        ("labels.gpu == true", ["gpu-1", "gpu-2"]),
        ("labels.gpu == 1", []),  # a boolean is not a number
        ("labels.gpu == false", ["cpu-1"]),
        ("requires", ["cpu-1"]),  # a list field alone: not empty
        ("gpu-1 in handoff_to", ["cpu-1"]),
        ("labels.missing != 3", ["cpu-1", "gpu-1", "gpu-2"]),
        ("(labels.gpu OR labels.zone == eu) AND NOT (labels.busy)", ["cpu-1", "gpu-1"]),
    ],
)
def test_evaluation(text: str, matches: list[str]) -> None:
    tree = parse_filter(text)
    assert sorted(c.name for c in (GPU, BUSY, CPU) if evaluate(tree, c)) == matches


@pytest.mark.parametrize(
    ("text", "position", "says"),
    [
        ("", 1, "empty"),
        ("labels.gpu AND", 15, "found the end"),
        ("labels.gpu labels.busy", 12, "expected AND, OR or the end"),
        ("(labels.gpu OR labels.x", 24, "expected ) to close the ( at position 1"),
        ("labels.x = 1", 10, "write =="),
        ("labels.x == 'eu", 13, "not closed"),
        ("labels.x == 1 $", 15, "unexpected character '$'"),
        ("salience > 50", 1, "comparison names no field"),
        ("gpu", 1, "not a condition"),
        ("1 == 2", 1, "names no field"),
        ("labels.x in 'x'", 13, "in needs a list"),
        ("labels.x == [1, 2]", 13, "a list can only follow in"),
        ("name in [a b]", 12, "expected , or ]"),
        ("name in [a, (]", 13, "expected a value in the list"),
        ("labels.x == )", 13, "expected a field or a value"),
        ("labels.9x", 1, "not a label key"),
    ],
)
def test_errors_name_the_position(text: str, position: int, says: str) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    assert caught.value.position == position, str(caught.value)
    assert says in str(caught.value)
    assert f"at position {position}" in str(caught.value)


def test_deep_nesting_and_long_text_are_refused_not_a_crash() -> None:
    with pytest.raises(FilterError, match="nested deeper"):
        parse_filter("(" * 100 + "labels.a" + ")" * 100)
    with pytest.raises(FilterError, match="nested deeper"):
        parse_filter("NOT " * 200 + "labels.a")
    parse_filter("(" * (MAX_DEPTH - 1) + "labels.a" + ")" * (MAX_DEPTH - 1))
    with pytest.raises(FilterError, match="longer than"):
        parse_filter("labels.a OR " * 200 + "labels.b")


def test_the_depth_limit_counts_parentheses_and_nots_only() -> None:
    parse_filter("(" * MAX_DEPTH + "labels.a" + ")" * MAX_DEPTH)  # exactly the limit
    parse_filter("NOT " * MAX_DEPTH + "labels.a")
    with pytest.raises(FilterError, match=f"nested deeper than {MAX_DEPTH}"):
        parse_filter("(" * (MAX_DEPTH + 1) + "labels.a" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(FilterError, match=f"nested deeper than {MAX_DEPTH}"):
        parse_filter("NOT " * (MAX_DEPTH + 1) + "labels.a")


TOKENS = st.sampled_from([
    "labels.gpu", "labels.x", "provides", "name", "AND", "OR", "NOT", "in", "==", "!=", "<",
    ">=", "(", ")", "[", "]", ",", "'s'", '"t', "1", "-2.5", "true", "code_review", "=", "$",
])  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=80), st.lists(TOKENS, max_size=25).map(" ".join)))
def test_any_text_parses_or_raises_filter_error_only(text: str) -> None:
    try:
        tree = parse_filter(text)
    except FilterError as exc:
        assert 1 <= exc.position <= len(text) + 1
        return
    for agent in (GPU, BUSY, CPU, Candidate("bare")):
        assert evaluate(tree, agent) in (True, False)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z_][a-z0-9_-]{0,10}", fullmatch=True),
        st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
        max_size=5,
    )
)
def test_evaluation_never_raises_whatever_the_labels(labels: dict[str, Any]) -> None:
    agent = Candidate("x", labels=labels)
    for text in ("labels.a > 1", "labels.a == 'x' OR labels.b in [1, true]", "NOT labels.a"):
        assert evaluate(parse_filter(text), agent) in (True, False)


def test_parse_labels() -> None:
    assert parse_labels("gpu=true, zone=eu,mem_gb=16,ratio=0.5,busy=False,") == {
        "gpu": True, "zone": "eu", "mem_gb": 16, "ratio": 0.5, "busy": False,
    }  # fmt: skip
    assert parse_labels("") == {}
    for bad in ("gpu", "9x=1", "a b=1", "=1"):
        with pytest.raises(ValueError, match="bad label"):
            parse_labels(bad)
    with pytest.raises(ValueError, match="over the limit"):
        parse_labels(",".join(f"k{i}=1" for i in range(LABELS_MAX + 1)))


def test_contract_labels_are_bounded() -> None:
    assert Contract(labels={"gpu": True, "zone": "eu"}).labels == {"gpu": True, "zone": "eu"}
    assert Contract(labels={"n": 2**63 - 1}).labels == {"n": 2**63 - 1}
    assert Contract(labels={"n": 2**63}).labels == {"n": float(2**63)}  # a double, then
    for labels in (
        {f"k{i}": 1 for i in range(LABELS_MAX + 1)},  # too many
        {"bad key": 1},
        {"v": "x" * 257},  # value too long
        {"v": [1, 2]},  # not a scalar
        {"v": 10**400},  # past a 64-bit int and a double
        {"v": -(10**400)},
    ):
        with pytest.raises(ValidationError):
            Contract.model_validate({"labels": labels})


def test_a_target_says_something_and_its_filter_parses() -> None:
    with pytest.raises(ValidationError, match="provides, filter or both"):
        Target()
    with pytest.raises(ValidationError, match="at position 12"):
        Target(filter="labels.gpu labels.x")
    with pytest.raises(ValidationError):
        Target(provides=["a"], count=0)
    target = Target(provides=["code_review"], filter="labels.gpu", count=1)
    assert target.describe() == '{provides: [code_review], filter: "labels.gpu", count: 1}'
    assert [c.name for c in (GPU, BUSY, CPU) if target.matches(c)] == ["gpu-1", "gpu-2"]


def test_choose_least_loaded_then_least_recently_chosen_then_name() -> None:
    one = Target(provides=["code_review"], count=1)
    agents = [BUSY, GPU, CPU]
    found = matching(one, agents)
    assert found == ["gpu-1", "gpu-2"]
    assert choose(one, found, lambda a: 0, {}) == (["gpu-1"], ["gpu-1", "gpu-2"])  # by name
    loads = {"gpu-1": 2, "gpu-2": 1}
    assert choose(one, found, loads.__getitem__, {})[0] == ["gpu-2"]  # least loaded
    assert choose(one, found, lambda a: 0, {"gpu-1": 5, "gpu-2": 3})[0] == ["gpu-2"]
    assert choose(one, found, lambda a: 0, {"gpu-2": 1})[0] == ["gpu-1"]  # never chosen first
    every = Target(provides=["code_review"])  # no count: every match
    assert choose(every, matching(every, agents), lambda a: 0, {})[0] == ["gpu-1", "gpu-2"]
    three = Target(provides=["code_review"], count=3)  # fewer match than needed: nobody
    assert choose(three, matching(three, agents), lambda a: 0, {}) == ([], ["gpu-1", "gpu-2"])


def test_candidate_from_a_registry_record() -> None:
    record = {"provides": ["a"], "requires": ["b"], "handoff_to": [], "labels": {"gpu": True}}
    agent = Candidate.of("x", record, kind="echo")
    assert (agent.provides, agent.requires, agent.labels, agent.kind) == (
        ("a",), ("b",), {"gpu": True}, "echo",
    )  # fmt: skip
    assert Candidate.of("y", {"provides": "not a list", "labels": 3}).provides == ()
