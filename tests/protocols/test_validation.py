"""validate_text / validate_data / load_cuelist: every check, every error, versions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import CuelistError
from protocols.validation import load_cuelist, validate_data, validate_text

EXAMPLES = sorted((Path(__file__).parents[2] / "cuelists").glob("*.yaml"))

GOOD = """\
cuelist: pipeline
defaults:
  target_agents: [specialist-build]
  retries: 1
cues:
  - id: CUE-100
    auto_follow: CUE-200  # the chain of the seed
  - id: CUE-200
    depends_on: [CUE-100]
"""


def test_every_example_is_valid() -> None:
    assert len(EXAMPLES) >= 5
    for path in EXAMPLES:
        report = validate_text(path.read_text(), str(path))
        assert report.valid, [str(i) for i in report.errors]
        warned = {i.code for i in report.warnings}
        assert warned == ({"resource_conflict"} if path.stem == "shared-runner" else set())


def test_a_valid_report() -> None:
    report = validate_text(GOOD, "good.yaml")
    assert report.valid and report.cuelist is not None and report.errors == []
    assert report.cuelist.cues[1].retries == 1
    assert report.version is not None and len(report.version) == 64
    as_dict = report.to_dict()
    assert as_dict["file"] == "good.yaml" and as_dict["version"] == report.version


def test_the_version_ignores_form_but_not_meaning() -> None:
    base = validate_text(GOOD).version
    reformatted = """\
# the same cuelist, written another way
cues:
- {depends_on: [CUE-100], id: CUE-200, retries: 1, target_agents: [specialist-build]}
- {id: CUE-100, auto_follow: CUE-200, target_agents: [specialist-build], retries: 1}
cuelist: pipeline
"""
    assert validate_text(reformatted).version != base  # cue order is meaning: start changes
    swapped = reformatted.replace("- {depends_on", "- {ZZ").splitlines()
    reordered = "\n".join([swapped[0], swapped[1], swapped[3], swapped[2], swapped[4]])
    reordered = reordered.replace("{ZZ", "{depends_on")
    assert validate_text(reordered).version == base
    as_json = validate_data({
        "cuelist": "pipeline",
        "cues": [
            {"id": "CUE-100", "auto_follow": "CUE-200", "target_agents": ["specialist-build"],
             "retries": 1},
            {"id": "CUE-200", "depends_on": ["CUE-100"], "target_agents": ["specialist-build"],
             "retries": 1},
        ],
    })  # fmt: skip
    assert as_json.version == base
    assert validate_text(GOOD.replace("retries: 1", "retries: 2")).version != base


def test_every_error_is_listed_with_cue_key_and_line() -> None:
    text = """\
cuelist: pipeline
cues:
  - id: CUE-100
    target_agents: [specialist-build]
    priorty: 5
  - id: CUE-200
    target_agents: []
    depends_on: [CUE-100, CUE-999]
  - id: CUE-100
    target_agents: [specialist-build]
"""
    report = validate_text(text, "p.yaml")
    assert not report.valid and report.cuelist is None and report.version is None
    found = {(i.code, i.cue, i.key, i.line) for i in report.errors}
    assert found == {
        ("unknown_key", "CUE-100", "priorty", 5),
        ("empty", "CUE-200", "target_agents", 7),
        ("unknown_cue", "CUE-200", "depends_on", 8),
        ("duplicate_id", "CUE-100", "id", 9),
    }
    assert all(i.file == "p.yaml" for i in report.issues)
    assert "did you mean 'priority'" in str(report.errors[0])
    assert str(report.errors[0]).startswith("p.yaml:5: cue CUE-100 key priorty: ")


def test_cycles_are_reported_with_their_path() -> None:
    text = GOOD.replace("depends_on: [CUE-100]", "auto_follow: CUE-100").replace(
        "  - id: CUE-100\n", "  - id: CUE-000\n  - id: CUE-100\n    depends_on: [CUE-000]\n"
    )
    report = validate_text(text)
    [cycle] = [i for i in report.errors if i.code == "cycle"]
    assert cycle.message == "cycle: CUE-100 -> CUE-200 -> CUE-100"


def test_a_cycle_through_the_first_cue_is_one_error_on_a_line_the_user_wrote() -> None:
    # no `start:` in the file: the first cue is the entry cue; its cycle is the one error
    text = "cuelist: c\ncues:\n  - id: A\n    target_agents: [a]\n    depends_on: [B]\n"
    text += "  - id: B\n    target_agents: [a]\n    depends_on: [A]\n"
    report = validate_text(text, "c.yaml")
    assert [str(i) for i in report.errors] == [
        "c.yaml:5: cue A key depends_on: cycle: A -> B -> A (cycle)"
    ]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # the first cue depends on a later one: its depends_on line, not a `start` key
        ("  - id: A\n    target_agents: [a]\n    depends_on: [B]\n"
         "  - id: B\n    target_agents: [a]\n", (5, "A", "depends_on")),
        # a later cue auto-follows into the first: that auto_follow line
        ("  - id: A\n    target_agents: [a]\n"
         "  - id: B\n    target_agents: [a]\n    auto_follow: A\n", (7, "B", "auto_follow")),
        # an explicit start: the line of `start:` itself
        ("  - id: B\n    target_agents: [a]\n    auto_follow: A\n"
         "  - id: A\n    target_agents: [a]\nstart: [A]\n", (8, "A", "start")),
    ],
)  # fmt: skip
def test_an_entry_cue_with_predecessors_names_the_key_in_the_file(
    text: str, where: tuple[int, str, str]
) -> None:
    report = validate_text("cuelist: e\ncues:\n" + text)
    [issue] = report.errors
    assert issue.code == "entry_has_predecessors"
    assert (issue.line, issue.cue, issue.key) == where
    line = ("cuelist: e\ncues:\n" + text).splitlines()[issue.line - 1]
    assert line.strip().startswith(f"{issue.key}:")


HANDOFF = """\
cuelist: handoffs
specialists:
  specialist-code: {provides: [code], handoff_to: [specialist-test]}
  specialist-test: {requires: [code, plan]}
cues:
  - id: CODE
    target_agents: [specialist-code]
    handoff: {to: specialist-test, context: [plan]}
"""


def test_static_handoff_checks() -> None:
    assert validate_text(HANDOFF).valid
    missing = validate_text(HANDOFF.replace("context: [plan]", "context: []"))
    [issue] = missing.errors
    assert (issue.code, issue.cue, issue.key, issue.line) == (
        "handoff_missing_keys", "CODE", "handoff.context", 8,
    )  # fmt: skip
    assert "plan" in issue.message
    refused = validate_text(HANDOFF.replace("handoff_to: [specialist-test]", "handoff_to: []"))
    assert [i.code for i in refused.errors] == ["handoff_not_allowed"]
    unknown = validate_text(HANDOFF.replace("[specialist-code]", "[specialist-other]"))
    assert unknown.valid  # no contract for the sender: nothing to check statically


def test_strict_makes_warnings_errors() -> None:
    text = """\
cuelist: shared
defaults: {target_agents: [a], resources: [runner]}
start: [A, B]
cues:
  - {id: A}
  - {id: B}
"""
    assert validate_text(text).valid
    assert [i.code for i in validate_text(text).warnings] == ["resource_conflict"]
    strict = validate_text(text, strict=True)
    assert not strict.valid and [i.code for i in strict.errors] == ["resource_conflict"]


def test_operator_only_cues_are_warned_about() -> None:
    text = GOOD + "  - id: CUE-300\n    conditions: [never]\n"
    codes = sorted(i.code for i in validate_text(text).warnings)
    assert codes == ["condition_never_raised", "needs_operator"]


@pytest.mark.parametrize(
    ("source", "code"),
    [
        (b"\xff\xfe", "bad_encoding"),
        ("", "not_a_mapping"),
        ("- a\n- b\n", "not_a_mapping"),
        ("cuelist: x\ncues: [", "bad_yaml"),
        ("cuelist: x\ncues:\n  - !!python/object:os.system {}\n", "unsupported_tag"),
    ],
)
def test_unusable_text_is_one_issue(source: str | bytes, code: str) -> None:
    report = validate_text(source, "f.yaml")
    assert [i.code for i in report.errors] == [code] and not report.valid


def test_too_many_cues() -> None:
    data = {"cuelist": "x", "cues": [{"id": f"C{i}"} for i in range(10_001)]}
    assert [i.code for i in validate_data(data).errors] == ["too_large"]


def test_load_cuelist() -> None:
    model, version = load_cuelist(GOOD)
    assert model.cuelist == "pipeline" and len(version) == 64
    assert load_cuelist({"cuelist": "x", "cues": [{"id": "A", "target_agents": ["a"]}]})
    with pytest.raises(CuelistError) as caught:
        load_cuelist(GOOD.replace("CUE-100]", "CUE-1]"))
    assert caught.value.issues[0].code == "unknown_cue"


def test_ten_thousand_cues_validate_in_time() -> None:
    lines = ["cuelist: big", "defaults: {target_agents: [a]}", "cues:"]
    lines += [f"  - {{id: C{i}, depends_on: [{f'C{i - 1}' if i else ''}]}}" for i in range(10_000)]
    started = time.perf_counter()
    report = validate_text("\n".join(lines))
    assert report.valid
    assert time.perf_counter() - started < 5  # ~0.5 s; generous for a loaded CI box


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
cue_like = st.fixed_dictionaries(
    {"id": st.sampled_from(["A", "B", "C", "bad id", 3])},
    optional={
        "target_agents": st.one_of(st.just(["a"]), json_values),
        "depends_on": st.lists(st.sampled_from(["A", "B", "C", "Z"]), max_size=3),
        "auto_follow": st.sampled_from(["A", "B", "C", "Z", None]),
        "resources": st.just(["r"]),
        "handoff": st.one_of(st.just({"to": "a"}), json_values),
        "manual": json_values,
    },
)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {"cuelist": st.sampled_from(["x", "Bad"]), "cues": st.lists(cue_like, max_size=5)},
        optional={"start": json_values, "defaults": json_values, "specialists": json_values},
    )
)
def test_any_data_gives_a_report_never_an_exception(data: dict[str, Any]) -> None:
    report = validate_data(data)
    assert report.valid == (not report.errors)
    assert all(i.message for i in report.issues)


def test_data_that_json_cannot_carry_is_refused() -> None:
    data = {"cuelist": "x", "cues": [{"id": "A", "target_agents": ["a"], "action": {"v": 1e999}}]}
    assert [i.code for i in validate_data(data).errors] == ["bad_value"]
    assert [i.code for i in validate_text("cuelist: x\na: .inf\n").errors] == ["bad_value"]


def test_on_repeated_failure_is_checked_and_its_pitfalls_warned() -> None:
    text = """cuelist: dbg
cues:
  - id: A
    target_agents: [a]
    retries: 2
    on_repeated_failure: {debugger: a}
  - id: B
    target_agents: [b]
    on_repeated_failure: {after: 0, debugger: d}
"""
    (bad,) = validate_text(text, "dbg.yaml").errors
    assert bad.cue == "B" and bad.key == "on_repeated_failure.after" and bad.line == 9
    fine = validate_text(text.replace("after: 0", "after: 2"), "dbg.yaml")
    codes = {(i.code, i.cue, i.key, i.line) for i in fine.warnings}
    assert ("retries_unused", "A", "retries", 5) in codes
    assert ("debugger_is_target", "A", "on_repeated_failure", 6) in codes
    assert fine.valid and fine.cuelist is not None
    assert fine.cuelist.cue("B").on_repeated_failure is not None
    plain = validate_text("cuelist: p\ncues:\n  - {id: A, target_agents: [a]}\n")
    assert not plain.warnings  # a cue without it is as before (and so is its version)


def test_warn_ahead_is_a_count_or_all_and_the_default_keeps_the_version() -> None:
    base = validate_text(GOOD).version
    one = GOOD.replace("  retries: 1\n", "  retries: 1\n  warn_ahead: 1\n")
    assert validate_text(one).version == base  # written or not, 1 is the default
    two = validate_text(GOOD.replace("  retries: 1\n", "  retries: 1\n  warn_ahead: 2\n"))
    assert two.cuelist is not None and two.cuelist.cues[0].warn_ahead == 2
    assert two.version != base
    every = validate_text(GOOD + "    warn_ahead: all\n")
    assert every.cuelist is not None and every.cuelist.cue("CUE-200").warn_ahead == "all"
    assert every.cuelist.cue("CUE-100").warn_ahead == 1
    for bad in ("-1", "three", "true", "1.5"):
        report = validate_text(GOOD + f"    warn_ahead: {bad}\n")
        (issue,) = report.errors
        assert (issue.cue, issue.key, issue.line) == ("CUE-200", "warn_ahead", 10)
        assert issue.message.startswith("should be a number of cues (0 or more) or 'all'")
