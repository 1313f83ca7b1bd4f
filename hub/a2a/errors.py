"""What the A2A front door answers when it cannot serve: `Unavailable` (no event stream to
spare, Redis down) as HTTP 503 with Retry-After on the HTTP+JSON binding and -32603 with
the reason over JSON-RPC; and `translated`, which turns the hub's own errors into the A2A
errors a client can act on, so no client input and no outage ends in a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2A_ERROR_REASONS,
    ErrorMapping,
    InternalError,
    InvalidParamsError,
)
from pydantic import ValidationError

from hub.fanout import TooManyStreams
from protocols.errors import TransportError

RETRY_AFTER_S = 5  # what a client is told to wait when Redis is out (the fanout says its own)
REASON = "UNAVAILABLE"


class Unavailable(InternalError):
    """The hub cannot serve this now; try again after `retry_after_s` (in `data` too)."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S) -> None:
        # google.rpc.ErrorInfo metadata holds strings
        super().__init__(message, data={"retry_after_s": str(retry_after_s)})
        self.retry_after_s = retry_after_s


# A2A 1.0 has no "unavailable" error: the SDK answers any error it does not know with 500
# (HTTP+JSON) or -32603 (JSON-RPC). Its HTTP+JSON mapping is looked up per error class at
# answer time, so registering ours makes it 503 (gRPC's UNAVAILABLE, what a client retries);
# JSON-RPC keeps -32603, with the reason and `retry_after_s` in the error's data.
A2A_ERROR_MAPPING[Unavailable] = ErrorMapping(503, "UNAVAILABLE", REASON)
A2A_ERROR_REASONS[Unavailable] = REASON


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Errors of the hub as A2A errors: a refused stream and a Redis outage as Unavailable,
    a request the API's models refuse (a name over 200 characters) as invalid params."""
    try:
        yield
    except TooManyStreams as exc:
        raise Unavailable(exc.detail, exc.retry_after_s) from None
    except TransportError as exc:
        raise Unavailable(f"the hub cannot reach Redis now ({exc}): try again later") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidParamsError(problems) from None
