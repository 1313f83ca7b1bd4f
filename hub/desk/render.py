"""The desk's Jinja2 environment: templates from the package, filters for times, ids and JSON,
and `can(method, path)`, which says whether the hub has a route, so an action's button
appears only once its route exists."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.routing import Route

from hub.engine import budgets
from hub.engine.state import RunState

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
STATIC_URL = "/desk-static"
JSON_PREVIEW = 160


def moment(epoch: float) -> datetime | None:
    """The UTC time of an epoch, or None when the calendar has none: a context entry's time
    is the agent's `sent_at`, which may lie before year 1 or after 9999 (or a stored number
    may not be finite), and `fromtimestamp` raises on those rather than answer."""
    try:
        return datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def clock(epoch: float | None) -> str:
    """Time of day in UTC to the millisecond ("" for what has not happened; the number
    itself for a time the calendar cannot hold)."""
    if epoch is None:
        return ""
    at = moment(epoch)
    return str(epoch) if at is None else at.strftime("%H:%M:%S.%f")[:-3]


def iso(epoch: float | None) -> str:
    if epoch is None:
        return ""
    at = moment(epoch)
    if at is None:
        return str(epoch)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def when(epoch: float | None) -> str:
    """Date and time in UTC to the second (the number itself when it has no date)."""
    if epoch is None:
        return ""
    at = moment(epoch)
    # isoformat, not strftime's %Y, which glibc writes unpadded ("1-01-01") before 1000
    return str(epoch) if at is None else at.replace(tzinfo=None).isoformat(" ", "seconds")


def seconds(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return ""
    span = end - start
    return f"{span * 1000:.0f} ms" if span < 1 else f"{span:.2f} s"


def segment(name: str) -> str:
    """`name` as one segment of a URL's path: a condition's name may hold `/` (and so `..`),
    which a browser's fetch would otherwise read as other segments, another route."""
    return quote(name, safe="")


def _text(ident: object) -> str:
    # what an agent sent need not be a string (a dead letter's run_id may be a number)
    return "" if ident is None else str(ident)


def short(ident: object, size: int = 8) -> str:
    return _text(ident)[:size]


def tail(ident: object, size: int = 8) -> str:
    """A run id for people: its random end (a UUIDv7 starts with the time, shared by runs
    started together); the full id is in the link and its title."""
    text = _text(ident)
    return text if len(text) <= size else "…" + text[-size:]


def compact(value: Any, limit: int = JSON_PREVIEW) -> str:
    """JSON on one line, cut at `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True, indent=2)


def entry_time(entry_id: str) -> str:
    """A stream entry id's time part, as a date and time."""
    head = entry_id.split("-", 1)[0]
    return when(int(head) / 1000) if head.isdigit() else ""


def spend(run: RunState) -> list[tuple[str, str, str]]:
    """(limit name, used, limit) for each limit of the run's budget: its head line."""
    if run.budget is None:
        return []
    used = budgets.used(run, run.completed_at or time.time())
    used["wall_s"] = round(used["wall_s"])
    return [
        (name, budgets.num(used.get(name, 0)), budgets.num(limit))
        for name, limit in budgets.limits(run.budget).items()
    ]


@cache
def asset_version(name: str) -> str:
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:12]


def static(name: str) -> str:
    """A desk asset's URL, versioned by its content so browsers may cache it."""
    return f"{STATIC_URL}/{name}?v={asset_version(name)}"


def walk_routes(routes: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route, into included routers: FastAPI keeps an included
    router whole (its `original_router`, under the include's prefix), not flattened."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            yield from walk_routes(inner.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif isinstance(route, Route):
            for method in route.methods or ():
                yield method, prefix + route.path


def routes_of(app: Any) -> frozenset[tuple[str, str]]:
    """Every (method, path) the app serves, read once."""
    found: frozenset[tuple[str, str]] | None = getattr(app.state, "desk_routes", None)
    if found is None:
        found = app.state.desk_routes = frozenset(walk_routes(app.routes))
    return found


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        clock=clock, iso=iso, when=when, short=short, tail=tail, compact=compact, pretty=pretty,
        entry_time=entry_time, segment=segment,
    )  # fmt: skip
    env.globals.update(static=static, seconds=seconds, spend=spend)
    return env


ENV = environment()


def page(request: Request, template: str, **context: Any) -> str:
    """Render a template with what every page needs."""

    def can(method: str, path: str) -> bool:
        return (method.upper(), path) in routes_of(request.app)

    return ENV.get_template(template).render(
        request=request, can=can, logged_in=getattr(request.state, "desk_cookie", False),
        **context,
    )  # fmt: skip
