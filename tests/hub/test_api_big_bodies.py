"""Big work a request does (checking a big cuelist body, building a big run's JSON) runs in a
worker thread, small work at once: 10,000 cues take a quarter of a second the engine's
event loop (and its lease) cannot spare."""

from __future__ import annotations

import threading

from hub.api.offload import off_the_loop_if


async def test_big_work_is_done_off_the_event_loop_and_small_work_at_once() -> None:
    loop_thread = threading.get_ident()
    assert await off_the_loop_if(True, threading.get_ident) != loop_thread
    assert await off_the_loop_if(False, threading.get_ident) == loop_thread
