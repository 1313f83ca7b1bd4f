"""`callboard specialist KIND --agent ID`: run one specialist replica in this process.

The lead registers `specialist` on the typer app; `python -m callboard.specialist_cmd`
runs it on its own (tests use that).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from protocols.contracts import Contract
from protocols.keys import DEFAULT_PREFIX
from protocols.settings import Settings
from specialists.builtin import load

# Shown in --help; the same defaults as protocols.settings.Settings.
DEFAULT_REDIS_URL = str(Settings.model_fields["redis_url"].default)
DEFAULT_API_URL = str(Settings.model_fields["api_url"].default)


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


def with_provides(contract: Contract, provides: str) -> Contract:
    """The contract with the comma-separated `provides` added (`--provides a,b`)."""
    extra = [p.strip() for p in provides.split(",") if p.strip()]
    if not extra:
        return contract
    merged = list(dict.fromkeys([*contract.provides, *extra]))
    return Contract.model_validate({**contract.model_dump(), "provides": merged})


def importable_here() -> None:
    """Put the current directory first on the import path, as `python -m` and `python
    script.py` do, so `callboard specialist mymodule:Class` finds ./mymodule.py."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def specialist(
    kind: Annotated[str, typer.Argument(help="shell, http, echo, a2a, mcp, or module:Class")],
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
    redis_url: Annotated[
        str,
        typer.Option("--redis-url", envvar="REDIS_URL", help="the Redis the hub uses"),
    ] = DEFAULT_REDIS_URL,
    prefix: Annotated[
        str,
        typer.Option("--prefix", envvar="CALLBOARD_PREFIX", help="the hub's key prefix"),
    ] = DEFAULT_PREFIX,
    api_url: Annotated[
        str,
        typer.Option(
            "--api-url", envvar="CALLBOARD_API_URL", help="the hub's API (to read a run's context)"
        ),
    ] = DEFAULT_API_URL,
    api_key: Annotated[
        str | None,
        typer.Option("--api-key", envvar="CALLBOARD_API_KEY", help="the hub's API key, if any"),
    ] = None,
    labels: Annotated[
        str,
        typer.Option(
            "--labels",
            envvar="CALLBOARD_LABELS",
            help="labels registered with the contract, for targets by capability: gpu=true,zone=eu",
        ),
    ] = "",
    provides: Annotated[
        str,
        typer.Option(
            "--provides",
            envvar="CALLBOARD_PROVIDES",
            help="capabilities added to the contract's provides (comma-separated): what a "
            "cue's target: {provides: [...]} finds it by",
        ),
    ] = "",
    url: Annotated[
        str | None,
        typer.Option("--url", help="a2a / mcp: the one agent or server this replica stands in for"),
    ] = None,
) -> None:
    """Run one specialist replica until SIGTERM/SIGINT or a broadcast.shutdown drains it.

    To join a cluster that `callboard up` started, copy the `export ...` line it prints
    (REDIS_URL, CALLBOARD_PREFIX, CALLBOARD_API_URL). KIND `module:Class` is imported with
    the current directory on the import path, as `python -m` does.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    importable_here()
    try:
        cls = load(kind)
        given: dict[str, object] = {
            "redis_url": redis_url, "prefix": prefix, "api_url": api_url, "api_key": api_key,
            "labels": labels,
        }  # fmt: skip
        if prefetch is not None:
            given["prefetch"] = prefetch
        settings = Settings.model_validate(given)
        extra: dict[str, Any] = {}
        if url is not None:
            if not getattr(cls, "takes_url", False):
                raise ValueError(f"--url is for the a2a and mcp kinds, not {kind!r}")
            extra["url"] = url
        spec = cls(
            agent,
            replica,
            settings,
            with_provides(read_contract(contract) if contract else cls.contract, provides),
            concurrency,
            **extra,
        )
    except (ValueError, OSError) as exc:  # a pydantic ValidationError is a ValueError
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(spec.main())


if __name__ == "__main__":
    typer.run(specialist)
