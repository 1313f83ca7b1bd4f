"""A cue's kept results: the running total of their size decides as measuring them all did."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import to_json

from hub.engine.state import RESULT_BYTES, RESULT_CUE_BYTES, RESULT_HEAD_BYTES, CueRun


def measured_all(result: dict[str, Any], agent: str, value: Any) -> None:
    """keep_result as it was written before its running total: every other target's result
    measured again at each completion."""
    raw = to_json(value, fallback=str)
    others = sum(len(to_json(v, fallback=str)) for a, v in result.items() if a != agent)
    if len(raw) > RESULT_BYTES or others + len(raw) > RESULT_CUE_BYTES:
        head = raw[:RESULT_HEAD_BYTES].decode("utf-8", errors="replace")
        value = {"truncated": True, "bytes": len(raw), "head": head}
    result[agent] = value


values = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.none(),
    st.builds(lambda n, c: {"log": c * n}, st.integers(0, 6_000), st.sampled_from('x\u00e9\n"')),
    st.lists(st.integers(0, 9), max_size=5),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("keep"), st.sampled_from("abcdefghijkl"), values),
        st.tuples(st.just("new attempt"), st.none(), st.none()),
        st.tuples(st.just("read back"), st.none(), st.none()),
        st.tuples(st.just("older hub"), st.none(), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_running_total_keeps_what_measuring_every_result_kept(ops: list[Any]) -> None:
    """Whatever the order of completions (a target answering twice, results past either
    limit), a new attempt's emptied results, the cue read back from its stored JSON, or a
    cue kept by a hub before the total (none stored): the same results are kept, cut the
    same way, as when every other target's result was measured at each completion."""
    cue, expected = CueRun(), dict[str, Any]()
    for op, agent, value in ops:
        if op == "keep":
            cue.keep_result(agent, value)
            measured_all(expected, agent, value)
        elif op == "new attempt":  # as the engine's fire and go do
            cue.clear_results()
            expected = {}
        elif op == "read back":
            cue = CueRun.model_validate_json(cue.model_dump_json())
        else:
            cue.result_bytes = 0
        assert cue.result == expected
        if cue.result_bytes:  # none after an older hub's cue, until the next completion
            assert cue.result_bytes == sum(len(to_json(v)) for v in expected.values())


def test_a_cue_of_many_targets_is_cut_at_the_cue_wide_limit() -> None:
    """Ten targets of 4,000 bytes each: those that fit under RESULT_CUE_BYTES are kept
    whole, the rest as their size and first bytes."""
    cue = CueRun()
    for n in range(10):
        cue.keep_result(f"t{n}", {"log": "x" * 3_980})
    whole = [a for a, v in cue.result.items() if "truncated" not in v]
    cut = [a for a, v in cue.result.items() if "truncated" in v]
    assert whole == [f"t{n}" for n in range(8)] and cut == ["t8", "t9"]
    assert all(len(cue.result[a]["head"]) == RESULT_HEAD_BYTES for a in cut)
    assert cue.result_bytes == sum(len(to_json(v)) for v in cue.result.values())
