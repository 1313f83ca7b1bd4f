"""What the API-client commands share: the hub options, `-o json|table`, exit codes.

Exit codes: 0 ok, 1 a refused request or a failed run, 2 unusable input, no hub, an answer
that is not the hub's API, or a command whose outcome is unknown (sent, never answered:
the message gives the Idempotency-Key to send it again with). With `-o json` stdout carries
only the hub's JSON answer (messages go to stderr), so `callboard runs -o json | jq`
works; errors are on stderr either way. Text from the hub is never read as Rich markup
(the consoles have markup off; our own styling is built as `Text`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console, RenderableType
from rich.text import Text

from callboard.client import ApiError, BadAnswer, Client, OutcomeUnknown, Unreachable
from callboard.profiles import ProfileError, resolve

OK, REFUSED, UNUSABLE = 0, 1, 2


class Output(StrEnum):
    table = "table"
    json = "json"


UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url", envvar="CALLBOARD_URL", show_default=False,
        help="the hub's API [default: the profile's, else http://127.0.0.1:8080]",
    ),
]  # fmt: skip
KeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", envvar="CALLBOARD_API_KEY", help="bearer key", show_default=False),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile", envvar="CALLBOARD_PROFILE", show_default=False,
        help="a hub named in ~/.config/callboard/profiles.toml (or $CALLBOARD_CONFIG)",
    ),
]  # fmt: skip
OutputOpt = Annotated[
    Output, typer.Option("--output", "-o", help="table for people, json for programs")
]
KeyedOpt = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key", show_default=False,
        help="the command's Idempotency-Key (default: a new one): the hub does it once however "
        "often it is sent with the same key, so after an unknown outcome send it again with it",
    ),
]  # fmt: skip

console = Console(markup=False)
PIPED_WIDTH = 400
errors = Console(stderr=True, markup=False)
# Tests replace this to run every command against an httpx.MockTransport.
TRANSPORT: httpx.BaseTransport | None = None


@contextmanager
def connect(url_flag: str | None, key_flag: str | None, profile: str | None) -> Iterator[Client]:
    """A client whose refusals and connection failures end the command with the right code."""
    try:
        hub = resolve(url_flag=url_flag, key_flag=key_flag, profile=profile)
    except ProfileError as exc:
        fail(str(exc), UNUSABLE)
    try:
        with Client(hub.url, hub.api_key, transport=TRANSPORT) as c:
            yield c
    except (Unreachable, BadAnswer) as exc:
        fail(str(exc), UNUSABLE)
    except OutcomeUnknown as exc:
        fail(
            f"{exc}; whether it took effect is unknown: see with `status`, or send it again "
            f"with --idempotency-key {exc.key} (the hub does it at most once)",
            UNUSABLE,
        )
    except ApiError as exc:
        refused = Text.assemble((f"refused ({exc.status}):", "red"), f" {exc.detail}")
        errors.print(refused, soft_wrap=True)
        for issue in exc.body.get("errors") or []:
            where = " ".join(
                f"{k}={issue[k]}" for k in ("cue", "key", "line") if issue.get(k) is not None
            )
            line = f"  - [{issue.get('code')}] {issue.get('message')}  {where}".rstrip()
            errors.print(line, soft_wrap=True)
        raise typer.Exit(UNUSABLE if exc.status >= 500 else REFUSED) from None


@dataclass
class Hub:
    """A command's hub options (`hub_options`); `url` and `api_key` hold typed flags only.
    In a group (`cuelists`, `escalations`) the group's own, typed before the subcommand
    (`callboard cuelists -o json show NAME`), fill in what the subcommand left out."""

    output: Output = Output.table
    url: str | None = None
    api_key: str | None = None
    profile: str | None = None

    def client(self) -> AbstractContextManager[Client]:
        return connect(self.url, self.api_key, self.profile)


def hub_options(
    ctx: typer.Context,
    output: Output = Output.table,
    url: str | None = None,
    api_key: str | None = None,
    profile: str | None = None,
) -> Hub:
    """A command's hub options: flags kept only when typed on the command line (the
    profile logic reads the environment itself, so it can tell a flag from a variable),
    merged over its group's options; stored on `ctx` for its subcommands."""

    def source(name: str) -> str:
        found = ctx.get_parameter_source(name)
        return found.name if found is not None else "DEFAULT"

    def typed(name: str, value: str | None) -> str | None:
        return value if source(name) == "COMMANDLINE" else None

    mine = Hub(output, typed("url", url), typed("api_key", api_key), profile)
    parent = ctx.parent.obj if ctx.parent is not None else None
    if isinstance(parent, Hub):
        if source("output") == "DEFAULT":
            mine.output = parent.output
        mine.url = mine.url or parent.url
        mine.api_key = mine.api_key or parent.api_key
        if source("profile") != "COMMANDLINE":
            mine.profile = parent.profile or mine.profile
    ctx.obj = mine
    return mine


def fail(message: str, code: int = UNUSABLE) -> Any:
    # one line, unwrapped: a message is for grep and logs as much as for a person
    errors.print(Text.assemble(("error:", "red"), f" {message}"), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def emit(output: Output, data: Any, table: Callable[[Any], None]) -> None:
    """The answer: as JSON on stdout only, or as `table` draws it for a person."""
    if output is Output.json:
        print_json(data)
    else:
        table(data)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def print_table(table: RenderableType) -> None:
    """A table for a person; piped, it is drawn wide, so no cell (an id above all) is cut."""
    if console.is_terminal:
        console.print(table)
    else:  # a console of its own: print(width=) cannot go past the console's width
        Console(width=PIPED_WIDTH, highlight=False, markup=False).print(table)


def say(message: str | Text) -> None:
    """A line for a person: on stdout in table mode (the caller skips it for json). A str
    is printed as it is (hub text may hold brackets); style goes in a `Text`."""
    console.print(message, highlight=False)


def json_arg(text: str | None, what: str) -> Any:
    """A JSON option value, or exit 2 naming the option."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(f"{what} is not JSON: {exc}")
