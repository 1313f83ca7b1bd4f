"""What the API-client commands share: --url and --api-key, and exit codes for failures.

Exit codes: 0 ok, 1 a refused request or a failed run, 2 unusable input or no hub.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console

from callboard.client import DEFAULT_URL, ApiError, Client, Unreachable

OK, REFUSED, UNUSABLE = 0, 1, 2

UrlOpt = Annotated[
    str, typer.Option("--url", envvar="CALLBOARD_URL", help="the hub's API", show_default=True)
]
KeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", envvar="CALLBOARD_API_KEY", help="bearer key", show_default=False),
]

console = Console()
errors = Console(stderr=True)


@contextmanager
def client(url: str = DEFAULT_URL, api_key: str | None = None) -> Iterator[Client]:
    """A client whose refusals and connection failures end the command with the right code."""
    try:
        with Client(url, api_key) as c:
            yield c
    except Unreachable as exc:
        errors.print(f"[red]error:[/] {exc}")
        raise typer.Exit(UNUSABLE) from None
    except ApiError as exc:
        errors.print(f"[red]refused ({exc.status}):[/] {exc.detail}")
        for issue in exc.body.get("errors") or []:
            where = " ".join(
                f"{k}={issue[k]}" for k in ("cue", "key", "line") if issue.get(k) is not None
            )
            errors.print(f"  - [{issue.get('code')}] {issue.get('message')}  {where}".rstrip())
        raise typer.Exit(UNUSABLE if exc.status >= 500 else REFUSED) from None
