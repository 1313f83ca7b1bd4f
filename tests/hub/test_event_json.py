"""A run event's JSON (hub.store.commit._json) is the bytes pydantic's `to_json` writes
(NaN and infinities as null, anything it cannot write as its str), or its error: orjson
writes what it writes the same, and hands the rest to pydantic whole."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import to_json

from hub.store.commit import _json
from protocols.states import CueState, FiredBy
from tests.protocols.test_codec_orjson import odd_value


@dataclasses.dataclass
class Point:
    x: int
    y: float


def pydantic_wrote(value: Any) -> bytes | type[Exception]:
    try:
        return bytes(to_json(value, fallback=str, inf_nan_mode="null"))
    except Exception as exc:
        return type(exc)


def ours(value: Any) -> bytes | type[Exception]:
    try:
        return _json(value)
    except Exception as exc:
        return type(exc)


# each kind of value as likely as any other (one_of would favour the simplest): what the
# engine puts in an event, what a specialist's result or usage may hold, containers of them
KINDS = [
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f * 1e300),
    st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones()), st.dates(), st.times(),
    st.uuids(), st.decimals(allow_nan=False, places=3), st.binary(max_size=4),
    st.sampled_from(list(CueState) + list(FiredBy)), st.builds(Point, st.integers(), st.floats()),
    st.just(object()), odd_value,
]  # fmt: skip
event_value = st.sampled_from(KINDS).flatmap(lambda kind: kind)
events = st.fixed_dictionaries(
    {"type": st.sampled_from(["cue", "go", "run", "usage"]), "at": st.floats()},
    optional={"cue": st.text(max_size=6), "state": st.sampled_from(list(CueState))},
).flatmap(
    lambda fixed: st.dictionaries(
        st.text(max_size=5) | st.sampled_from(list(CueState)), event_value, max_size=4
    ).map(lambda extra: {**fixed, **extra})
)


@settings(max_examples=400, deadline=None)
@given(events)
def test_an_event_is_written_as_pydantic_writes_it(event: dict[str, Any]) -> None:
    assert ours(event) == pydantic_wrote(event)


def test_an_engine_event_takes_orjson_and_the_odd_ones_pydantic() -> None:
    """The common event is orjson's (no fallback); what orjson would write otherwise is
    pydantic's: a datetime with its Z, a dataclass, a key that is not a string."""
    event = {"type": "cue", "at": 1.5, "cue": "C", "state": CueState.GO, "attempt": 1}
    assert _json(event) == b'{"type":"cue","at":1.5,"cue":"C","state":"go","attempt":1}'
    for odd in (datetime(2026, 12, 6, tzinfo=UTC), Point(1, 2.0), {1: "a"}, 2**70, {1, 2}):
        assert _json({"x": odd}) == bytes(to_json({"x": odd}, fallback=str, inf_nan_mode="null"))
