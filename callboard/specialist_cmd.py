"""`callboard specialist KIND --agent ID`: run one specialist replica in this process.

The lead registers `specialist` on the typer app; `python -m callboard.specialist_cmd`
runs it on its own (tests use that).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
import yaml

from protocols.contracts import Contract
from protocols.settings import Settings
from specialists.builtin import load


def read_contract(path: Path) -> Contract:
    """A contract file, YAML or JSON: `{requires, provides, handoff_to, description}`,
    at the top level or under `agent:` (its `id` is ignored)."""
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if isinstance(data, dict) and isinstance(data.get("agent"), dict):
        data = data["agent"]
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a contract must be a mapping")
    data = {k: v for k, v in data.items() if k not in ("id", "name")}
    return Contract.model_validate(data)


def specialist(
    kind: Annotated[str, typer.Argument(help="shell, http, echo, or module:Class")],
    agent: Annotated[str, typer.Option("--agent", help="the agent id this replica serves")],
    replica: Annotated[
        str | None, typer.Option("--replica", help="replica name (default: host-pid)")
    ] = None,
    contract: Annotated[
        Path | None, typer.Option("--contract", help="contract file (YAML or JSON)")
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, envvar="CALLBOARD_CONCURRENCY")
    ] = 1,
    prefetch: Annotated[
        int | None,
        typer.Option(
            "--prefetch", min=1, help="entries held at most, running or queued (4 x concurrency)"
        ),
    ] = None,
    log_level: Annotated[str, typer.Option("--log-level", envvar="CALLBOARD_LOG_LEVEL")] = "INFO",
) -> None:
    """Run one specialist replica until SIGTERM/SIGINT or a broadcast.shutdown drains it."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        cls = load(kind)
        settings = Settings() if prefetch is None else Settings(prefetch=prefetch)
        spec = cls(
            agent,
            replica,
            settings,
            read_contract(contract) if contract else None,
            concurrency,
        )
    except (ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(spec.main())


if __name__ == "__main__":
    typer.run(specialist)
