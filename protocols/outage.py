"""How a hub or specialist that cannot reach Redis says so: one line, a growing wait.

A process whose Redis is away (not started yet, restarting, a wrong REDIS_URL) must not
print a traceback every second. `Outage` counts consecutive failures: the wait before the
next try doubles from `first_s` up to `max_s`, and `fail()` says to log only the first
failure of an outage and then one reminder every `remind_s`; `ok()` says whether an outage
just ended (worth one line too). `is_unreachable` tells that case from a real crash;
`one_line` turns the error into that line's reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from protocols.errors import Unreachable


class Outage:
    def __init__(
        self,
        first_s: float = 0.5,
        max_s: float = 5.0,
        remind_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first_s = first_s
        self.max_s = max_s
        self.remind_s = remind_s
        self.clock = clock
        self.failures = 0
        self._said_at: float | None = None

    @property
    def down(self) -> bool:
        return self.failures > 0

    def fail(self) -> tuple[float, bool]:
        """One more failed try: (seconds to wait before the next, whether to log it)."""
        self.failures += 1
        delay_s = min(self.max_s, self.first_s * 2 ** (self.failures - 1))
        now = self.clock()
        say = self._said_at is None or now - self._said_at >= self.remind_s
        if say:
            self._said_at = now
        return delay_s, say

    def ok(self) -> bool:
        """A try succeeded: True when that ends an outage."""
        ended = self.failures > 0
        self.failures = 0
        self._said_at = None
        return ended


def is_unreachable(exc: BaseException) -> bool:
    """Redis out of reach: a lost, refused or timed-out connection (the storage gateway
    translates every such redis-py error to Unreachable). The one place this is decided."""
    return isinstance(exc, Unreachable)


def one_line(exc: BaseException) -> str:
    """The first line of an error's message, its type when it has none."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def redacted(url: str) -> str:
    """A Redis URL fit for a log line: any password replaced by `***`."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<a url that does not parse>"
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}{port}"
    return urlunsplit(parts._replace(netloc=netloc))
