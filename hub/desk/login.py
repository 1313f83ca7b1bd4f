"""The desk's login: a form that posts the API key once and gets the session cookie back,
the check every desk page makes, and logout."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from hub.desk import session
from hub.desk.problems import PageRoute
from hub.desk.render import page

router = APIRouter(include_in_schema=False, route_class=PageRoute)
MAX_FORM_BYTES = 4096


class LoginRequired(Exception):
    """A desk page asked for without a session: answered with a redirect to the login form."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def signed_in(request: Request) -> bool:
    """True without an API key, or with the right key as a bearer token or cookie."""
    key: str | None = request.state.api_key
    if not key:
        return True
    header = request.headers.get("authorization", "")
    if header.startswith("Bearer ") and session.key_matches(key, header[len("Bearer ") :]):
        return True
    if session.valid(key, request.cookies.get(session.COOKIE)):
        request.state.desk_cookie = True
        return True
    return False


async def require_page(request: Request) -> None:
    """For pages: without a session, go to the login form and come back."""
    if not signed_in(request):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)


def local_path(target: str | None) -> str:
    """Where to go after login: a path on this hub only (never `//host` or a URL)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def login_redirect(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LoginRequired)
    return RedirectResponse(f"/login?next={quote(exc.path, safe='/')}", status_code=303)


def _form(request: Request, error: str | None, target: str, status: int = 200) -> HTMLResponse:
    html = page(request, "login.html", error=error, next=target, nav="login")
    return HTMLResponse(html, status_code=status)


@router.get("/login")
async def login_form(
    request: Request, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    if not request.state.api_key:
        return RedirectResponse(local_path(next), status_code=303)
    return _form(request, None, local_path(next))


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the posted key; on success set the cookie (HttpOnly, SameSite=Strict)."""
    key: str | None = request.state.api_key
    body = await request.body()
    fields = parse_qs(body[:MAX_FORM_BYTES].decode("utf-8", errors="replace"))
    target = local_path((fields.get("next") or ["/"])[0])
    if not key:
        return RedirectResponse(target, status_code=303)
    given = (fields.get("key") or [""])[0].strip()
    if not session.key_matches(key, given):
        return _form(request, "That is not this hub's API key.", target, status=401)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        session.COOKIE, session.issue(key), max_age=session.SESSION_S, path="/",
        httponly=True, samesite="strict", secure=request.url.scheme == "https",
    )  # fmt: skip
    return response


@router.post("/logout")
async def logout() -> Response:
    """Forget the cookie (no CSRF header needed: it only ends this browser's session)."""
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(session.COOKIE, path="/", httponly=True, samesite="strict")
    return response


PageAuth = [Depends(require_page)]
