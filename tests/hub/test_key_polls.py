"""A request waiting on another's Idempotency-Key looks again less and less often."""

from __future__ import annotations

from itertools import islice

from hub.api.idempotency import POLL_MAX_S, POLL_S, _polls


def test_the_waits_double_up_to_their_cap() -> None:
    waits = list(islice(_polls(60.0), 7))
    assert waits[:5] == [POLL_S * 2**i for i in range(5)]
    assert waits[4:] == [POLL_MAX_S] * 3


def test_no_wait_goes_past_the_deadline() -> None:
    assert list(_polls(0.0)) == []
    assert all(0 < wait <= 0.05 for wait in islice(_polls(0.05), 3))
