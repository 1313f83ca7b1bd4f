"""Outage: the backoff and the one-line-per-outage rule that hub and specialists log by."""

from __future__ import annotations

from protocols.outage import Outage, one_line, redacted


def test_delays_double_to_a_cap_and_only_the_first_failure_is_said() -> None:
    now = [0.0]
    outage = Outage(first_s=0.5, max_s=4.0, remind_s=60.0, clock=lambda: now[0])
    seen = []
    for _ in range(6):
        seen.append(outage.fail())
        now[0] += 1.0
    assert [d for d, _ in seen] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert [say for _, say in seen] == [True, False, False, False, False, False]
    now[0] += 60.0
    assert outage.fail() == (4.0, True)  # a reminder a minute while it lasts
    assert outage.down and outage.ok()  # it ended: worth a line
    assert not outage.ok()  # and only once
    assert outage.fail() == (0.5, True)  # a new outage starts from the beginning


def test_one_line_and_redacted() -> None:
    assert one_line(ConnectionError("refused\n  detail")) == "refused"
    assert one_line(TimeoutError()) == "TimeoutError"
    assert redacted("redis://u:secret@host:6380/0") == "redis://u:***@host:6380/0"
    assert redacted("redis://host:6379/0") == "redis://host:6379/0"
    assert "secret" not in redacted("rediss://:secret@host/1")
