"""The desk's login session: an HttpOnly cookie derived from the API key, and the CSRF rule.

The cookie holds `ISSUED.MAC`, MAC = HMAC-SHA256(key, "callboard-desk:" ISSUED), never the
key. It is valid for SESSION_S after it was issued and only while the hub has the same key
(changing CALLBOARD_API_KEY logs every browser out). A request authenticated by the cookie
alone that changes state must also carry CSRF_HEADER: a browser adds a custom header only
to same-origin requests made by our own script, so a cross-site form or fetch cannot.
"""

from __future__ import annotations

import hashlib
import hmac
import time

COOKIE = "callboard_desk"
CSRF_HEADER = "X-Callboard-Desk"
SESSION_S = 12 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _mac(key: str, issued: int) -> str:
    message = f"callboard-desk:{issued}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def issue(key: str, now: float | None = None) -> str:
    """A new cookie value for a browser that proved it knows `key`."""
    issued = int(time.time() if now is None else now)
    return f"{issued}.{_mac(key, issued)}"


def valid(key: str, value: str | None, now: float | None = None) -> bool:
    """True when `value` was issued for `key` less than SESSION_S ago."""
    if not value or "." not in value:
        return False
    issued_text, mac = value.split(".", 1)
    if not issued_text.isdigit() or len(issued_text) > 12:
        return False
    issued = int(issued_text)
    age = (time.time() if now is None else now) - issued
    if not 0 <= age <= SESSION_S + 60:  # a minute of clock slack between hub processes
        return False
    return hmac.compare_digest(mac.encode(), _mac(key, issued).encode())


def key_matches(expected: str, given: str) -> bool:
    """The API key check, in constant time."""
    return hmac.compare_digest(given.encode(), expected.encode())


def csrf_ok(method: str, headers: dict[str, str] | object) -> bool:
    """A state-changing request made with the cookie must carry the desk's header."""
    if method.upper() in SAFE_METHODS:
        return True
    get = getattr(headers, "get", None)
    return bool(get and get(CSRF_HEADER) == "1")
