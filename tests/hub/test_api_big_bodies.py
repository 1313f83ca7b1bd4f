"""A big cuelist body is checked in a worker thread, a small one at once: checking 10,000
cues takes a quarter of a second the engine's event loop (and its lease) cannot spare."""

from __future__ import annotations

import threading

from hub.api.routes.cuelists import BIG_BODY_BYTES, _off_the_loop_if_big


async def test_a_big_body_is_checked_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    assert await _off_the_loop_if_big(BIG_BODY_BYTES + 1, threading.get_ident) != loop_thread
    assert await _off_the_loop_if_big(BIG_BODY_BYTES, threading.get_ident) == loop_thread
