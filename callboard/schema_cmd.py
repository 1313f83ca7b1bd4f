"""`callboard schema`: the cuelist language's JSON Schema, or with `--messages` the wire's.

Without `--out` one JSON document goes to stdout (with `--messages`: file name -> schema);
with `--out DIR` each schema is written to its own file there (`cuelist.json`, or the
files of schemas/messages/ in the repository).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from callboard.validate_cmd import cuelist_schema
from protocols.schemas import message_schemas


def render(schema: dict[str, Any]) -> str:
    """The one text form of a schema file (the drift test compares these)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def schema(
    messages: Annotated[
        bool, typer.Option("--messages", help="the envelope and every payload instead")
    ] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="write one file per schema into DIR")
    ] = None,
) -> None:
    """Print the JSON Schema of the cuelist language (for editors), or of the messages."""
    files = message_schemas() if messages else {"cuelist.json": cuelist_schema()}
    if out is None:
        typer.echo(render(files if messages else files["cuelist.json"]), nl=False)
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, found in files.items():
            (out / name).write_text(render(found))
    except OSError as exc:
        typer.echo(f"error: cannot write to {out}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {len(files)} schema files to {out}")
