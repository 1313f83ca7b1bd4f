"""`callboard cuelists`: list the stored cuelists, `show` one, `delete` one (or a version),
and `schedule pause|resume` its cron schedule."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from callboard.commands.api import (
    Hub,
    KeyOpt,
    Output,
    OutputOpt,
    ProfileOpt,
    UrlOpt,
    console,
    emit,
    fail,
    hub_options,
    print_table,
    say,
)

app = typer.Typer(
    name="cuelists",
    help="Stored cuelists: list (the default), show, delete, schedule pause|resume.",
    invoke_without_command=True,
    no_args_is_help=False,
)
schedule_app = typer.Typer(name="schedule", help="Pause or resume a cuelist's schedule.")
app.add_typer(schedule_app)
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="a stored cuelist")]


@app.callback()
def cuelists(
    ctx: typer.Context,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Stored cuelists: list (the default), show, delete, schedule pause|resume."""
    hub = hub_options(ctx, output, url, api_key, profile)
    if ctx.invoked_subcommand is None:
        _list(hub)


@app.command("list")
def list_(
    ctx: typer.Context,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Every stored cuelist: its latest version and how many it has."""
    _list(hub_options(ctx, output, url, api_key, profile))


def _list(hub: Hub) -> None:
    with hub.client() as c:
        page = c.cuelists()
    emit(hub.output, page, _list_table)


def _list_table(page: dict[str, Any]) -> None:
    if not page["data"]:
        say("no cuelists")
        return
    table = Table(show_edge=False)
    for column in ("name", "latest", "versions"):
        table.add_column(column)
    for row in page["data"]:
        table.add_row(row["name"], row.get("latest") or "", str(row["versions"]))
    print_table(table)


@app.command()
def show(
    ctx: typer.Context,
    name: NameArg,
    source: Annotated[
        bool, typer.Option("--source", help="print the YAML of the latest (or --version)")
    ] = False,
    version: Annotated[str | None, typer.Option(help="with --source: this version")] = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """One cuelist: every stored version (newest first); --source prints a version's text."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        found = c.cuelist(name)
    if source:
        wanted = version or found["latest"]
        match = [v for v in found["versions"] if v["version"].startswith(wanted)]
        if len(match) != 1:
            fail(f"{name} has {'no' if not match else 'several'} versions {wanted!r}")
        text = match[0].get("source") or ""
        emit(hub.output, match[0], lambda _: console.out(text, highlight=False))
        return
    emit(hub.output, found, _show_table)


def _show_table(found: dict[str, Any]) -> None:
    say(Text.assemble((found["name"], "bold"), f" latest {found['latest']}"))
    table = Table(show_edge=False)
    for column in ("version", "stored", "cues"):
        table.add_column(column)
    for v in found["versions"]:
        cues = len((v.get("cuelist") or {}).get("cues") or [])
        table.add_row(v["version"], v.get("stored_at") or "", str(cues))
    print_table(table)


@app.command()
def delete(
    ctx: typer.Context,
    name: NameArg,
    version: Annotated[
        str | None, typer.Option(help="delete only this version (default: every version)")
    ] = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Delete a cuelist (every version, or --version): new runs of it are refused; runs
    already going keep the version they started with."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        answer = c.delete_cuelist(name, version)
    emit(hub.output, answer, lambda a: say(f"deleted {a['name']}: {', '.join(a['deleted'])}"))


def _schedule(
    ctx: typer.Context,
    action: str,
    name: str,
    output: Output,
    url: str | None,
    api_key: str | None,
    profile: str | None,
) -> None:
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        answer = c.schedule(name, action)

    def show(a: dict[str, Any]) -> None:
        state = "paused" if a.get("paused") else "running"
        say(f"{a['name']}: schedule {a.get('schedule') or '(none)'} {state}")

    emit(hub.output, answer, show)


@schedule_app.command()
def pause(
    ctx: typer.Context,
    name: NameArg,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Stop starting scheduled runs of NAME (runs going on are not touched)."""
    _schedule(ctx, "pause", name, output, url, api_key, profile)


@schedule_app.command()
def resume(
    ctx: typer.Context,
    name: NameArg,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Start scheduled runs of NAME again."""
    _schedule(ctx, "resume", name, output, url, api_key, profile)
