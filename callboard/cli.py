"""The `callboard` typer app: it only registers commands; each lives in its own module."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated

import typer

from callboard.commands import register
from callboard.conformance.cmd import conformance
from callboard.schema_cmd import schema
from callboard.specialist_cmd import specialist
from callboard.validate_cmd import validate

app = typer.Typer(
    name="callboard",
    help="A hub-and-spoke orchestrator for specialist agents over Redis Streams.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def version_text() -> str:
    try:
        return f"callboard {package_version('callboard')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "callboard (not installed)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit(0)


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """A hub-and-spoke orchestrator for specialist agents over Redis Streams.

    Which hub the API commands talk to: --url / --api-key, else the profile named by
    --profile or CALLBOARD_PROFILE, else CALLBOARD_URL / CALLBOARD_API_KEY, else the
    default profile of ~/.config/callboard/profiles.toml, else http://127.0.0.1:8080.
    """


app.command("validate")(validate)
app.command("schema")(schema)
app.command("specialist")(specialist)
app.command("conformance")(conformance)
register(app)

if __name__ == "__main__":
    app()
