"""The `callboard` typer app: it only registers commands; each lives in its own module."""

from __future__ import annotations

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
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("validate")(validate)
app.command("schema")(schema)
app.command("specialist")(specialist)
app.command("conformance")(conformance)
register(app)

if __name__ == "__main__":
    app()
