"""`callboard hub`: one process that runs the hub (election, engine, routing) and its REST API.

Without CALLBOARD_API_KEY it refuses to listen beyond loopback. SIGTERM / SIGINT stop it
cleanly: live event streams end, the lease is released, connections close.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, NoReturn

import typer
import uvicorn

from hub.api import create_app
from hub.api.hosts import is_loopback
from hub.service import Hub, HubSettings
from protocols.process import loop_name, tune_gc

GRACEFUL_S = 5


class _Server(uvicorn.Server):
    """uvicorn's server, which also tells the app's live streams to end on a signal."""

    def __init__(self, config: uvicorn.Config, on_exit: Any) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: Any) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)
        # a signal asks for a clean stop: exit 0 after it instead of re-raising the signal
        self._captured_signals.clear()


def serve(settings: HubSettings, log_level: str = "info", built: Hub | None = None) -> None:
    """Run the hub (`built` from `settings`, unless given) and its API until a signal."""
    tune_gc()
    app = create_app(built or Hub(settings))
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=log_level.lower(),
        timeout_graceful_shutdown=GRACEFUL_S, lifespan="on", loop=loop_name(),
    )  # fmt: skip
    _Server(config, app.state.stopping.set).run()


def hub(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on", min=0, max=65535)] = 8080,
    log_level: Annotated[str, typer.Option(envvar="CALLBOARD_LOG_LEVEL")] = "info",
) -> None:
    """The hub: engine and REST API (docs at /docs)."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = HubSettings(host=host, port=port)
    except ValueError as exc:  # a pydantic ValidationError is a ValueError
        _refuse(str(exc))
    if not settings.api_key and not is_loopback(host):
        _refuse(
            f"refusing to listen on {host} without CALLBOARD_API_KEY "
            "(set a key, or listen on 127.0.0.1)"
        )
    try:
        built = Hub(settings)  # a setting it cannot take (a tracing one) stops it here
    except ValueError as exc:
        _refuse(str(exc))
    serve(settings, log_level, built)


def _refuse(reason: str) -> NoReturn:
    """A configuration the hub cannot run with: one line and exit status 2, no traceback."""
    typer.echo(f"error: {reason}", err=True)
    raise typer.Exit(2)


def main() -> None:
    typer.run(hub)


if __name__ == "__main__":
    main()
