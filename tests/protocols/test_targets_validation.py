"""Validation of cues that name a `target:` instead of `target_agents`."""

from __future__ import annotations

from protocols.canonical import canonical_json, version_of
from protocols.cuelist import Cuelist
from protocols.targeting import Candidate
from protocols.validation import validate_text, with_registry_warnings

BY_CAPABILITY = """\
cuelist: review
defaults:
  target_agents: [builder]
specialists:
  builder: {provides: [code], handoff_to: [reviewer]}
cues:
  - id: BUILD
    auto_follow: REVIEW
    handoff: {to: reviewer}
  - id: REVIEW
    target: {provides: [code_review], count: 1}
  - id: TRAIN
    depends_on: [REVIEW]
    target: {filter: "labels.gpu AND NOT labels.busy"}
    handoff: {to: builder}
"""


def test_a_target_replaces_the_default_target_agents_and_handoff_checks_skip_it() -> None:
    report = validate_text(BY_CAPABILITY, "review.yaml")
    assert report.valid, [str(i) for i in report.errors]
    assert report.cuelist is not None
    review = report.cuelist.cue("REVIEW")
    assert review.target_agents is None and review.target is not None
    assert review.target.count == 1 and review.fixed_agents == ()
    assert report.cuelist.cue("BUILD").target_agents == ["builder"]


def _only_error(text: str) -> dict[str, object]:
    report = validate_text(text, "bad.yaml")
    assert not report.valid
    assert len(report.errors) == 1, [str(i) for i in report.errors]
    return report.errors[0].model_dump()


def test_both_or_neither_is_an_error_naming_cue_and_key() -> None:
    both = "cuelist: x\ncues:\n  - id: A\n    target_agents: [a]\n    target: {provides: [p]}\n"
    issue = _only_error(both)
    assert (issue["code"], issue["cue"], issue["key"], issue["line"]) == (
        "target_conflict", "A", "target", 5,
    )  # fmt: skip
    assert issue["file"] == "bad.yaml"
    assert "not both" in str(issue["message"])
    neither = "cuelist: x\ncues:\n  - id: A\n    description: nobody\n"
    issue = _only_error(neither)
    assert (issue["code"], issue["cue"]) == ("no_target", "A")
    assert "target_agents" in str(issue["message"]) and "target" in str(issue["message"])


def test_a_filter_that_does_not_parse_names_file_line_cue_key_and_position() -> None:
    text = (
        "cuelist: x\ncues:\n  - id: A\n    target_agents: [a]\n  - id: B\n"
        '    target:\n      filter: "labels.gpu AND"\n'
    )
    issue = _only_error(text)
    assert (issue["code"], issue["cue"], issue["key"], issue["line"], issue["file"]) == (
        "bad_filter", "B", "target.filter", 6, "bad.yaml",
    )  # fmt: skip
    # the line is the cue's `target:`, as for other nested keys
    assert "at position 15" in str(issue["message"])


def test_empty_target_unknown_key_and_bad_count() -> None:
    for target, code, key in (
        ("{}", "empty_target", "target"),
        ("{provides: [a], max: 2}", "unknown_key", "target.max"),
        ("{provides: [a], count: 0}", "bad_value", "target.count"),
    ):
        issue = _only_error(f"cuelist: x\ncues:\n  - id: A\n    target: {target}\n")
        assert (issue["code"], issue["cue"], issue["key"]) == (code, "A", key), issue


def test_warns_when_no_registered_agent_matches_now() -> None:
    reviewer = Candidate("rev-1", provides=("code_review",))
    gpu = Candidate("gpu-1", labels={"gpu": True})
    report = with_registry_warnings(validate_text(BY_CAPABILITY), [reviewer, gpu], strict=False)
    assert report.valid and [i.code for i in report.warnings] == []
    report = with_registry_warnings(validate_text(BY_CAPABILITY), [gpu], strict=False)
    assert report.valid
    (warning,) = report.warnings
    assert (warning.code, warning.cue, warning.key) == ("no_agent_matches", "REVIEW", "target")
    assert "{provides: [code_review], count: 1}" in warning.message
    strict = with_registry_warnings(validate_text(BY_CAPABILITY), [gpu], strict=True)
    assert not strict.valid and strict.cuelist is None
    assert [i.code for i in strict.errors] == ["no_agent_matches"]


def test_versions_of_cuelists_without_targets_or_labels_do_not_change() -> None:
    plain = validate_text("cuelist: x\ncues:\n  - {id: A, target_agents: [a]}\n")
    assert plain.cuelist is not None
    text = canonical_json(plain.cuelist)
    assert '"target"' not in text and '"labels"' not in text  # as before targets existed
    report = validate_text(BY_CAPABILITY)
    assert report.cuelist is not None
    again = Cuelist.model_validate_json(canonical_json(report.cuelist))
    assert again.cues == report.cuelist.cues and version_of(again) == report.version


HANDING = """
cuelist: handing
specialists:
  inline-sender: {provides: [code], handoff_to: [tester]}
cues:
  - id: BUILD
    target_agents: [builder]
    handoff: {to: tester, context: [notes]}
  - id: MORE
    target_agents: [inline-sender]
    depends_on: [BUILD]
    handoff: {to: tester}
"""


def test_handoffs_are_checked_against_the_registered_contracts_too() -> None:
    """SPEC: the cuelist's inline contracts, else the registry's. Submit checked the inline
    ones only, so a handoff the registered contracts refuse failed only when the cue ran."""
    builder = Candidate("builder", provides=("code",), handoff_to=("deployer",))
    tester = Candidate("tester", requires=("code", "notes", "tests"))
    report = with_registry_warnings(validate_text(HANDING), [builder, tester], strict=False)
    assert report.valid  # the registry may change before the cues run: warnings
    found = sorted((i.code, i.cue, i.key) for i in report.warnings)
    assert found == [
        ("handoff_missing_keys", "BUILD", "handoff.context"),  # tests: nobody provides it
        ("handoff_missing_keys", "MORE", "handoff.context"),  # notes, tests: by tester's
        ("handoff_not_allowed", "BUILD", "handoff.to"),  # builder hands off to deployer
    ], found
    assert all(i.line is not None for i in report.warnings)
    allowed = Candidate("builder", provides=("code", "tests"), handoff_to=("tester",))
    fine = Candidate("tester", requires=("code",))
    quiet = with_registry_warnings(validate_text(HANDING), [allowed, fine], strict=False)
    assert [i.code for i in quiet.warnings] == []
    strict = with_registry_warnings(validate_text(HANDING), [builder, tester], strict=True)
    assert not strict.valid and len(strict.errors) == 3
