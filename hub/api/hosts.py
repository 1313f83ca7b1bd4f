"""Which Host a hub without an API key answers: loopback names only (DNS rebinding).

A hub without CALLBOARD_API_KEY listens on loopback only (hub.main), but a browser on the
same machine can still be pointed at it under another name: a page of evil.example whose
name is then re-pointed at 127.0.0.1 reads the runs and gives GO as its own origin, with
no credential to steal. Such a request carries the attacker's name in its Host header;
refusing every Host that is not a loopback address or `localhost` stops it. With a key,
the key (or the desk's cookie, which a rebound page never has) is the check, and any name
is answered (a proxy, a compose service name).
"""

from __future__ import annotations

import ipaddress

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 in brackets or not) is this machine."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The name in a Host header, without its port: `[::1]:8080` -> `[::1]`."""
    if header.startswith("["):
        return header.partition("]")[0] + "]"
    return header.rpartition(":")[0] if ":" in header else header


class LoopbackHosts:
    """Answers 421, in JSON, a request whose Host is not a loopback name (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = Headers(scope=scope).get("host")
            if header is not None and not is_loopback(host_of(header)):
                answer = JSONResponse(
                    {"detail": f"this hub has no API key and answers loopback names only, "
                     f"not {header[:100]!r} (set CALLBOARD_API_KEY to serve other names)"},
                    status_code=421,
                )  # fmt: skip
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)
