"""The optional `traceparent` on the envelope: checked, ignored when malformed, absent when off."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols import payloads as p
from protocols.codec import decode, encode, make
from protocols.messages import MessageType as T
from protocols.tracecontext import (
    TRACEPARENT_PATTERN,
    cue_span_id,
    format_traceparent,
    parse_traceparent,
    run_span_id,
    run_trace_id,
    trace_context,
    valid_traceparent,
    with_traceparent,
)

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _ack(**fields: object) -> bytes:
    return encode(make(T.ACK_WARNING, p.AckWarning(attempt=1), run_id="r1", cue_id="C", **fields))


def test_no_traceparent_is_written_when_there_is_none() -> None:
    raw = _ack()
    assert b"traceparent" not in raw
    assert decode(raw).traceparent is None


def test_a_valid_traceparent_travels() -> None:
    raw = _ack(traceparent=GOOD)
    assert json.loads(raw)["traceparent"] == GOOD
    assert decode(raw).traceparent == GOOD


@pytest.mark.parametrize(
    "bad",
    [
        42,
        None,
        "",
        "garbage",
        GOOD.upper(),
        GOOD + "-extra",
        "01" + GOOD[2:],
        "ff" + GOOD[2:],
        "00-" + "0" * 32 + GOOD[35:],
        GOOD[:36] + "0" * 16 + "-01",
        GOOD.replace("-", "_"),
        "x" * 10_000,
    ],
)
def test_a_malformed_traceparent_is_ignored_not_refused(bad: object) -> None:
    body = json.loads(_ack())
    body["traceparent"] = bad
    message = decode(json.dumps(body))  # decodes: the message is routed as usual
    assert message.traceparent is None
    assert message.message_type is T.ACK_WARNING and message.run_id == "r1"


def test_ids_derived_from_the_run_are_stable_and_distinct() -> None:
    assert run_trace_id("run-1") == run_trace_id("run-1") != run_trace_id("run-2")
    ids = {run_span_id("run-1"), cue_span_id("run-1", "A", 1), cue_span_id("run-1", "A", 2)}
    assert len(ids) == 3 and all(0 < i < 2**64 for i in ids)
    assert 0 < run_trace_id("run-1") < 2**128
    text = format_traceparent(run_trace_id("r"), run_span_id("r"))
    assert valid_traceparent(text) == text
    assert parse_traceparent(text) == (run_trace_id("r"), run_span_id("r"), True)


@pytest.mark.parametrize("mt", [T.COORD_GO, T.TASK_ASSIGN, T.ACK_WARNING])
def test_a_traceparent_added_to_an_encoded_envelope_is_the_envelope_encoded_with_it(
    mt: T,
) -> None:
    """What the hub writes (hub.store.commit) is byte for byte the model's own encoding."""
    payloads = {
        T.COORD_GO: p.CoordGo(cue_id="C", target_agents=["a"], action={"x": [1, "é"]}),
        T.TASK_ASSIGN: p.TaskAssign(cue_id="C", description="d"),
        T.ACK_WARNING: p.AckWarning(attempt=2),
    }
    message = make(mt, payloads[mt], target_agents=("a",), run_id="r1", cue_id="C")
    traced = with_traceparent(encode(message), GOOD)
    assert traced == encode(message.model_copy(update={"traceparent": GOOD}))
    assert decode(traced).traceparent == GOOD


def test_the_trace_context_of_a_span_of_a_run() -> None:
    span_id = cue_span_id("r", "C", 1)
    assert trace_context("r", span_id) == format_traceparent(run_trace_id("r"), span_id)
    left_out = trace_context("r", span_id, sampled=False)
    assert left_out == format_traceparent(run_trace_id("r"), span_id, sampled=False)
    assert left_out.endswith("-00") and valid_traceparent(left_out) == left_out
    assert parse_traceparent(left_out) == (run_trace_id("r"), span_id, False)


_HEX = st.text("0123456789abcdef", min_size=1, max_size=1)
_WELL_FORMED = st.from_regex(TRACEPARENT_PATTERN, fullmatch=True)  # zeros included


def _zeros_but_one(size: int) -> st.SearchStrategy[str]:
    """An id of zeros with one digit set (maybe to 0, or uppercase)."""
    digit = st.sampled_from("0123456789abcdefA")
    return st.builds(
        lambda i, d: "0" * i + d + "0" * (size - 1 - i), st.integers(0, size - 1), digit
    )


_CANDIDATES = st.one_of(
    _WELL_FORMED,
    st.builds(
        lambda trace, span, flags: f"00-{trace}-{span}-{flags}",
        _zeros_but_one(32),
        _zeros_but_one(16),
        st.text("0123456789abcdefF", min_size=2, max_size=2),
    ),
    st.builds(  # a well-formed one with one character changed, and maybe one more at the end
        lambda good, i, c, more: good[:i] + c + good[i + 1 :] + more,
        _WELL_FORMED,
        st.integers(0, 54),
        st.one_of(_HEX, st.characters()),
        st.sampled_from(["", "\n", "0"]),
    ),
    st.text(max_size=60),
    st.integers(),
    st.none(),
)


@given(_CANDIDATES)
def test_the_envelope_checks_the_traceparent_as_valid_traceparent_does(value: object) -> None:
    """The field's check runs in pydantic-core; `valid_traceparent` is the rule in Python.
    Decoded from JSON or made in Python, the envelope keeps exactly what the rule accepts."""
    body = json.loads(_ack())
    body["traceparent"] = value
    assert decode(json.dumps(body)).traceparent == valid_traceparent(value)
    message = make(T.ACK_WARNING, p.AckWarning(attempt=1), traceparent=value)
    assert message.traceparent == valid_traceparent(value)
