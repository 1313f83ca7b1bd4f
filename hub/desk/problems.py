"""What a desk page answers when it cannot show what was asked for: the desk's own HTML page
(not found, or a query value the page refuses) for a person in a browser, where the API's
routes answer JSON."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from hub.desk.render import page


def problem(request: Request, heading: str, what: str, status: int) -> HTMLResponse:
    html = page(request, "problem.html", heading=heading, what=what, nav="")
    return HTMLResponse(html, status_code=status)


def missing(request: Request, what: str) -> HTMLResponse:
    return problem(request, "Not found", what, 404)


def refused(request: Request, exc: RequestValidationError) -> HTMLResponse:
    """A query value the page's route refused (`?page=abc`): which, and why."""
    issues = []
    for err in exc.errors():
        names = [str(p) for p in err.get("loc", ()) if p not in ("query", "path", "body")]
        where = f"{'.'.join(names)}: " if names else ""
        issues.append(f"{where}{err.get('msg', 'not valid')}")
    what = f"The address has a value this page does not take ({'; '.join(issues)})."
    return problem(request, "Bad request", what, 422)


class PageRoute(APIRoute):
    """The route class of the desk's pages: a refused query value is answered with the
    desk's HTML page (422). The app's handler of RequestValidationError is the API's, and
    answers JSON; catching it here keeps that handler for the API's routes alone."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return refused(request, exc)

        return handle
