"""The CLI commands of the API client, the hub, `up` and `acl`: `register(app)` adds them
(routes.py maps every API route to its command)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from callboard.acl import acl
    from callboard.commands import cuelists, escalations
    from callboard.commands.follow import context, events
    from callboard.commands.go import go
    from callboard.commands.hubinfo import (
        agents,
        broadcast,
        card,
        deadletters,
        health,
        metrics,
        wiring,
    )
    from callboard.commands.run import run
    from callboard.commands.runs import budget, cancel, condition, rerun, retry, runs
    from callboard.commands.status import status
    from callboard.commands.submit import submit
    from callboard.up import up
    from hub.main import hub

    app.command("hub")(hub)
    app.command("up")(up)
    app.command("submit")(submit)
    app.command("run")(run)
    app.command("go")(go)
    app.command("status")(status)
    app.command("runs")(runs)
    app.command("cancel")(cancel)
    app.command("condition")(condition)
    app.command("retry")(retry)
    app.command("rerun")(rerun)
    app.command("budget")(budget)
    app.command("events")(events)
    app.command("context")(context)
    app.add_typer(cuelists.app)
    app.add_typer(escalations.app)
    app.command("agents")(agents)
    app.command("card")(card)
    app.command("deadletters")(deadletters)
    app.command("broadcast")(broadcast)
    app.command("wiring")(wiring)
    app.command("health")(health)
    app.command("metrics")(metrics)
    app.command("acl")(acl)
