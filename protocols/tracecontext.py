"""W3C trace context on the envelope: the `traceparent` check, and the ids derived from a run.

Pure code. A specialist is untrusted, so a `traceparent` it sends that is not a valid W3C
version-00 value is dropped (the field reads as absent) instead of refusing the message:
the field is optional and only ever informs traces, never routing.

A run's trace id and the span ids of its run and cue spans are derived from the run id
(SHA-256), so any hub, after any restart, names the same spans without storing them.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Any

TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"  # as JSON Schema says it
TRACEPARENT_MAX = 55  # len("00-" + 32 + "-" + 16 + "-" + 2)


def _not_all_zeros(digits: int) -> str:
    """`digits` lowercase hex digits, not all zeros, without a lookahead: a regex the
    codec's validator (pydantic-core's, in Rust) runs as well as Python's `re`."""
    return (
        "(?:"
        + "|".join(f"0{{{i}}}[1-9a-f][0-9a-f]{{{digits - 1 - i}}}" for i in range(digits))
        + ")"
    )


# The whole rule: version 00, ids of 32 and 16 lowercase hex digits, neither all zeros
# (W3C: invalid), two hex digits of flags.
TRACEPARENT_RULE = f"^00-{_not_all_zeros(32)}-{_not_all_zeros(16)}-[0-9a-f]{{2}}$"
_TRACEPARENT = re.compile(TRACEPARENT_RULE)


def valid_traceparent(value: Any) -> str | None:
    """`value` when it is a valid W3C version-00 traceparent, else None (ignored): the rule
    the envelope's `traceparent` field checks (protocols.codec, in pydantic-core)."""
    if not isinstance(value, str) or len(value) != TRACEPARENT_MAX:
        return None
    return value if _TRACEPARENT.match(value) is not None else None


def format_traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def with_traceparent(encoded: bytes, traceparent: str) -> bytes:
    """An encoded envelope that has no traceparent, with `traceparent` (a valid one): the
    field comes last in the envelope's JSON, so it is appended rather than the model copied
    and encoded again (the hub stamps every message it sends when tracing is on)."""
    return b'%s,"traceparent":"%s"}' % (encoded[:-1], traceparent.encode())


_ODD = frozenset("13579bdf")  # the hex digits with the low bit (W3C: sampled) set


def parse_traceparent(value: str) -> tuple[int, int, bool]:
    """(trace id, span id, sampled) of a traceparent that `valid_traceparent` accepted."""
    return int(value[3:35], 16), int(value[36:52], 16), value[54] in _ODD


def _digest(*parts: str, size: int) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:size], "big") or 1  # all zeros is invalid in W3C


@lru_cache(maxsize=4096)  # asked for on every message and span of a run
def run_trace_id(run_id: str) -> int:
    """The trace every span of run `run_id` belongs to."""
    return _digest("callboard-trace", run_id, size=16)


@lru_cache(maxsize=4096)
def run_span_id(run_id: str) -> int:
    """The run's span: the root of its trace."""
    return _digest("callboard-run", run_id, size=8)


def cue_span_id(run_id: str, cue_id: str, attempt: int) -> int:
    """One attempt of one cue (WARNING to completed or failed): a child of the run's span."""
    return _digest("callboard-cue", run_id, cue_id, str(attempt), size=8)


@lru_cache(maxsize=4096)
def _trace_prefix(run_id: str) -> str:
    return f"00-{run_trace_id(run_id):032x}-"


def trace_context(run_id: str, span_id: int, sampled: bool = True) -> str:
    """The traceparent of span `span_id` of run `run_id`'s trace."""
    return f"{_trace_prefix(run_id)}{span_id:016x}-{'01' if sampled else '00'}"
