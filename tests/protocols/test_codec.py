"""Envelope encode/decode: every type round-trips; bad bytes fail with raw bytes and reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from protocols import payloads as p
from protocols.codec import ENVELOPES, decode, encode, make
from protocols.errors import DecodeError, OversizedMessage, UnknownMessageType
from protocols.keys import AGENT_ID_PATTERN
from protocols.messages import MessageType

text = st.text(min_size=1, max_size=12)
agent_id = st.from_regex(AGENT_ID_PATTERN, fullmatch=True)
json_scalar = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_value = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
json_obj = st.dictionaries(st.text(max_size=8), json_value, max_size=4)


def _json_fields(model: type[p.Payload]) -> dict[str, st.SearchStrategy[Any]]:
    """Strategies for the free-form JSON fields hypothesis cannot infer."""
    out: dict[str, st.SearchStrategy[Any]] = {}
    for name, field in model.model_fields.items():
        if field.annotation == dict[str, Any]:
            out[name] = json_obj
        elif field.annotation is Any:
            out[name] = json_value
        elif field.annotation is float:  # models refuse inf/nan: JSON has no such numbers
            out[name] = st.floats(0, 1e6)
    return out


def payload_strategy(mt: MessageType) -> st.SearchStrategy[p.Payload]:
    model = p.PAYLOAD_MODELS[mt]
    if model is p.TaskHandoff:
        ctx = st.builds(
            p.HandoffContext,
            work_completed=st.lists(text, max_size=3),
            artifacts_produced=st.lists(st.builds(p.Artifact, path=text, hash=text), max_size=2),
        )
        return st.builds(
            model, from_agent=text, to_agent=agent_id, task_id=text, handoff_context=ctx
        )
    if model is p.TaskContext:
        return st.builds(model, key=text, **_json_fields(model))
    return st.builds(model, **_json_fields(model))


@pytest.mark.parametrize("mt", list(MessageType), ids=str)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_type_survives_encode_decode(mt: MessageType, data: st.DataObject) -> None:
    payload = data.draw(payload_strategy(mt))
    message = make(mt, payload, run_id=data.draw(st.none() | text), target_agents=("a", "b"))
    back = decode(encode(message))
    assert back == message
    assert type(back) is ENVELOPES[mt]
    assert back.payload == payload


def test_make_refuses_wrong_payload_model() -> None:
    with pytest.raises(TypeError, match=r"coord\.go takes CoordGo"):
        make(MessageType.COORD_GO, p.AckWarning())


def test_reply_correlates() -> None:
    warning = make(
        MessageType.COORD_WARNING,
        p.CoordWarning(cue_id="C1", target_agents=["a"]),
        run_id="r1",
        cue_id="C1",
    )
    ack = warning.reply(MessageType.ACK_WARNING, p.AckWarning(attempt=1))
    assert (ack.in_reply_to, ack.run_id, ack.cue_id) == (warning.message_id, "r1", "C1")


@pytest.mark.parametrize(
    ("raw", "error", "reason"),
    [
        (b"\xff\xfenot json", DecodeError, "not JSON"),
        (b"[1, 2]", DecodeError, "bad field envelope"),
        (b"{}", DecodeError, "missing message_type"),
        (b'{"message_type": "status.bogus", "payload": {}}', UnknownMessageType, "status.bogus"),
        (b'{"message_type": "coord.go", "payload": {}}', DecodeError, "payload.cue_id"),
        (  # the hub forwards it to the inbox named after it: an agent id, or refused
            b'{"message_type": "task.handoff", "payload": {"from_agent": "a", "to_agent": '
            b'"B}:x", "task_id": "T"}}',
            DecodeError,
            "payload.to_agent",
        ),
    ],
)
def test_bad_bytes_keep_raw_and_reason(raw: bytes, error: type[Exception], reason: str) -> None:
    with pytest.raises(error) as caught:
        decode(raw)
    assert caught.value.raw == raw  # type: ignore[attr-defined]
    assert reason in caught.value.reason  # type: ignore[attr-defined]


def test_unknown_envelope_field_refused() -> None:
    good = json.loads(encode(make(MessageType.ACK_WARNING, p.AckWarning())))
    good["sneaky"] = 1
    with pytest.raises(DecodeError, match="sneaky"):
        decode(json.dumps(good).encode())


def test_oversized_refused_before_parsing() -> None:
    raw = b'{"x": "' + b"a" * 300_000 + b'"}'
    with pytest.raises(OversizedMessage) as caught:
        decode(raw)
    assert caught.value.raw == raw
    big_ok = encode(make(MessageType.BROADCAST_NOTICE, p.BroadcastNotice(text="a" * 1000)))
    assert decode(big_ok, max_bytes=len(big_ok)).payload.text == "a" * 1000  # type: ignore[attr-defined]


def test_handoff_context_provided_keys() -> None:
    ctx = p.HandoffContext(implemented_code="x", work_completed=["done"])  # type: ignore[call-arg]
    assert ctx.provided_keys() == {"implemented_code", "work_completed"}


@pytest.mark.parametrize(
    "usage",
    [{"tokens": p.USAGE_MAX + 1}, {"tokens": 10**400}, {"cost": p.COST_MAX * 2},
     {"counters": {"calls": p.USAGE_MAX + 1}}],
)  # fmt: skip
def test_a_usage_report_past_its_caps_is_refused_with_its_reason(usage: dict[str, Any]) -> None:
    """A report no total could add without breaking a step (a sum past float's range, an
    int no metric or JSON reader takes) is a bad message: a dead letter with its reason."""
    with pytest.raises(DecodeError) as caught:
        decode(_completion(usage))
    assert "payload.usage" in caught.value.reason
    most = {"tokens": p.USAGE_MAX, "cost": p.COST_MAX, "counters": {"calls": p.USAGE_MAX}}
    assert decode(_completion(most)).payload.usage == p.Usage(**most)  # type: ignore[attr-defined]


def _completion(usage: dict[str, Any]) -> bytes:
    """A status.completed reporting `usage`, as its sender wrote it."""
    done = make(MessageType.STATUS_COMPLETED, p.StatusCompleted(), run_id="r", cue_id="C")
    body = json.loads(encode(done))
    body["payload"]["usage"] = usage
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "usage",
    [{"tokens": True}, {"tokens": "5"}, {"tokens": 5.5}, {"cost": False}, {"cost": "0.5"},
     {"counters": {"calls": True}}, {"counters": {"calls": "3"}}],
)  # fmt: skip
def test_a_usage_value_of_another_json_type_is_refused(usage: dict[str, Any]) -> None:
    """Usage is counted as JSON sends it: `true` is not one token, nor `"5"` five (a lax
    reading had an agent's typo spend a budget); an integer still takes `5.0`, as JSON
    Schema's integer does, and a cost an integer."""
    with pytest.raises(DecodeError) as caught:
        decode(_completion(usage))
    assert "payload.usage" in caught.value.reason
    as_numbers = {"tokens": 5.0, "cost": 2, "counters": {"calls": 3.0}}
    got = decode(_completion(as_numbers)).payload.usage  # type: ignore[attr-defined]
    assert got == p.Usage(tokens=5, cost=2.0, counters={"calls": 3})
    with pytest.raises(ValidationError):  # as a `task.context` write's metadata.usage
        p.Usage.model_validate(usage)
