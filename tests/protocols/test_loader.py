"""The safe loader: plain data only, line numbers, and limits that refuse fast."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.errors import CuelistError
from protocols.loader import MAX_BYTES, MAX_DEPTH, check_plain, load, parse_json

TEXT = """\
cuelist: demo
defaults:
  retries: 1
cues:
  - id: CUE-100
    target_agents: [a]

  - {id: CUE-200, depends_on: [CUE-100]}
  - id: CUE-300
    auto_follow: null
"""


def refused(text: str) -> str:
    with pytest.raises(CuelistError) as caught:
        load(text)
    [issue] = caught.value.issues
    return str(issue.code)


def test_lines_of_keys_cues_and_cue_keys() -> None:
    doc = load(TEXT)
    assert doc.data["cues"][1] == {"id": "CUE-200", "depends_on": ["CUE-100"]}
    lines = doc.lines
    assert lines.top == {"cuelist": 1, "defaults": 2, "cues": 4}
    assert lines.nested[("defaults", "retries")] == 3
    assert lines.cues == [5, 8, 9]
    assert lines.cue(0, "target_agents") == 6
    assert lines.cue(2, "auto_follow") == 10
    assert lines.cue(2, "no_such_key") == 9
    assert lines.at(("cues", 1, "depends_on", 0)) == 8
    assert lines.at(("defaults", "retries")) == 3
    assert lines.at(("cuelist",)) == 1


def test_scalars_follow_yaml_but_stay_json() -> None:
    doc = load("a: [yes, no, ~, 0x10, 1.5, '5', 2024-01-02]\non: 1\n1: x\n")
    assert doc.data == {"a": [True, False, None, 16, 1.5, "5", "2024-01-02"], "on": 1, "1": "x"}
    json.dumps(doc.data, allow_nan=False)


def test_merge_keys_and_shared_aliases() -> None:
    doc = load("base: &b {retries: 1, priority: 2}\ncue:\n  <<: *b\n  priority: 5\n")
    assert doc.data["cue"] == {"retries": 1, "priority": 5}


def test_json_is_accepted() -> None:
    data = {"cuelist": "x", "cues": [{"id": "A", "target_agents": ["a"]}]}
    assert load(json.dumps(data)).data == data
    assert load(json.dumps(data, indent="\t")).data == data


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("!!python/object/apply:os.system ['echo hi']", "unsupported_tag"),
        ("a: !!python/name:os.system", "unsupported_tag"),
        ("a: !custom 1", "unsupported_tag"),
        ("a: !!binary aGk=", "unsupported_tag"),
        ("a: [1, 2", "bad_yaml"),
        ("a: 1\n---\nb: 2\n", "bad_yaml"),
        ("a: *nowhere", "bad_yaml"),
        ("a: &x [1, *x]", "bad_yaml"),
        ("? [a, b]\n: c\n", "bad_yaml"),
        ("a: .nan", "bad_value"),
        ("a: !!int twelve", "bad_yaml"),
        ("a: \ud800", "bad_encoding"),
    ],
)
def test_refused_with_one_clear_issue(text: str, code: str) -> None:
    assert refused(text) == code


def test_a_python_tag_names_its_line() -> None:
    with pytest.raises(CuelistError) as caught:
        load("cuelist: x\ncues:\n  - !!python/object:os.system {}\n")
    [issue] = caught.value.issues
    assert issue.line == 3 and "not allowed" in issue.message


def test_duplicate_keys_are_reported_not_fatal() -> None:
    doc = load("a: 1\nb: 2\na: 3\n")
    assert doc.data == {"a": 3, "b": 2}
    [issue] = doc.issues
    assert (issue.code, issue.line) == ("duplicate_key", 3)


def test_json_duplicate_keys_are_reported_with_their_line() -> None:
    doc = parse_json('{"a": 1,\n "b": {"c": 2,\n  "c": 3}}')
    assert doc.data == {"a": 1, "b": {"c": 3}}
    [issue] = doc.issues
    assert (issue.code, issue.line, issue.message) == (
        "duplicate_key",
        3,
        "key 'c' appears twice in one mapping",
    )
    assert parse_json(b'{"a": 1, "b": 2}').issues == []


def test_json_that_yaml_cannot_read_still_has_its_duplicates_found() -> None:
    long_key = "k" * 2000  # over YAML's 1,024-character limit for a key
    text = f'{{"{long_key}": 1, "{long_key}": 2}}'
    [issue] = parse_json(text).issues
    assert issue.code == "duplicate_key" and issue.line is None and "kkk..." in issue.message
    [fallback] = load(text).issues  # the YAML loader's JSON fallback refuses them too
    assert fallback.code == "duplicate_key"


BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n"
    for p, c in zip("abcdefghi", "bcdefghij", strict=True)
)


@pytest.mark.parametrize(
    "text",
    [
        BILLION_LAUGHS,
        "[" * 200_000 + "]" * 200_000,  # libyaml's flow scanner is quadratic in depth
        "- " * 300_000 + "x",  # its composer would recurse in C and crash
        "".join(" " * i + "a:\n" for i in range(MAX_DEPTH + 5)),
    ],
    ids=["billion-laughs", "deep-flow", "deep-block", "deep-mapping"],
)
def test_bombs_are_refused_in_milliseconds(text: str) -> None:
    started = time.perf_counter()
    assert refused(text) == "too_large"
    assert time.perf_counter() - started < 0.5


def test_size_limit() -> None:
    assert refused("a: " + "x" * MAX_BYTES) == "too_large"


def test_plain_data_limits() -> None:
    check_plain({"a": [1, {"b": None}]})
    deep: dict[str, object] = {}
    node = deep
    for _ in range(MAX_DEPTH + 1):
        node["a"] = node = {}
    with pytest.raises(CuelistError):
        check_plain(deep)
    with pytest.raises(CuelistError):
        check_plain({1: "x"})


yaml_ish = st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#,? \n\t0.~<%@`")), max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=80), yaml_ish))
def test_any_text_loads_or_is_refused_with_issues(text: str) -> None:
    try:
        doc = load(text)
    except CuelistError as exc:
        assert exc.issues and all(i.code and i.message for i in exc.issues)
        return
    json.dumps(doc.data, allow_nan=False)  # always plain JSON-compatible data
