"""Mount the desk on the hub's app: its pages, login, and its own script and styles."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from hub.desk import lists, login, pages
from hub.desk.headers import DeskHeaders
from hub.desk.render import STATIC_DIR, STATIC_URL


def install(app: FastAPI) -> None:
    app.add_middleware(DeskHeaders)
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="desk-static")
    app.add_exception_handler(login.LoginRequired, login.login_redirect)
    app.include_router(login.router)
    app.include_router(pages.parts_router)
    app.include_router(pages.router)
    app.include_router(lists.router)
