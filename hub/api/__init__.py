"""The hub's REST API (FastAPI): `create_app(hub)` builds it; hub/main.py serves it."""

from hub.api.app import create_app

__all__ = ["create_app"]
