"""The CLI commands of the API client, the hub, `up` and `acl`: `register(app)` adds them."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from callboard.acl import acl
    from callboard.commands.go import go
    from callboard.commands.run import run
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
    app.command("acl")(acl)
