"""`callboard validate FILE...` and `callboard schema`: check cuelists offline, print the schema.

Exit codes of validate: 0 every file valid, 1 some file invalid, 2 some file unusable
(missing, unreadable, not UTF-8, over the size limit).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from protocols.cuelist import Cuelist
from protocols.loader import MAX_BYTES
from protocols.validation import Report, validate_text

VALID, INVALID, UNUSABLE = 0, 1, 2


def validate(
    files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="cuelists; - is stdin")],
    strict: Annotated[bool, typer.Option("--strict", help="warnings are errors")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON document on stdout")] = False,
) -> None:
    """Check cuelists offline: exit 0 valid, 1 invalid, 2 unusable input."""
    raise typer.Exit(check_files(files, strict=strict, as_json=as_json))


def cuelist_schema() -> dict[str, Any]:
    found = Cuelist.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **found}


def check_files(files: list[Path], *, strict: bool = False, as_json: bool = False) -> int:
    results: list[dict[str, Any]] = []
    code = VALID
    for path in files:
        name = str(path)
        raw, problem, why = _read(path)
        if raw is None:
            code = UNUSABLE
            unusable = {"code": why, "message": problem, "severity": "error"}
            results.append(
                {
                    "file": name,
                    "valid": False,
                    "name": None,
                    "version": None,
                    "errors": [unusable],
                    "warnings": [],
                }
            )
            if not as_json:
                typer.secho(f"{name}: cannot use: {problem}", err=True, fg="red")
            continue
        report = validate_text(raw, file=name, strict=strict)
        if not report.valid and code == VALID:
            code = INVALID
        results.append(report.to_dict())
        if not as_json:
            _print(report)
    if as_json:
        typer.echo(json.dumps({"files": results}, indent=2))
    return code


def _read(path: Path) -> tuple[str | None, str, str]:
    """The text of a file, or None, why it cannot be used and a code for that: a file over
    the size limit is unusable input (like one that is not text), not an invalid cuelist;
    only MAX_BYTES + 1 bytes are read to find out."""
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with path.open("rb") as handle:
                data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None, "no such file", "unusable"
    except IsADirectoryError:
        return None, "a directory, not a file", "unusable"
    except OSError as exc:
        return None, exc.strerror or str(exc), "unusable"
    if len(data) > MAX_BYTES:
        return None, f"over the {MAX_BYTES}-byte limit of a cuelist", "too_large"
    try:
        return data.decode("utf-8"), "", ""
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start})", "unusable"


def _print(report: Report) -> None:
    for issue in report.issues:
        typer.echo(issue.format())
    name = report.file or "-"
    if report.valid:
        warned = len(report.warnings)
        more = f", {warned} warning{'s' if warned != 1 else ''}" if warned else ""
        typer.secho(f"{name}: valid, version {report.version}{more}", fg="green")
    else:
        count = len(report.errors)
        typer.secho(f"{name}: invalid, {count} error{'s' if count != 1 else ''}", fg="red")
