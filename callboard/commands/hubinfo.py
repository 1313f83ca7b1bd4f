"""What the hub knows beyond runs: `agents`, `deadletters`, `broadcast`, `wiring`,
`health` and `metrics`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from callboard.commands.api import (
    REFUSED,
    KeyedOpt,
    KeyOpt,
    Output,
    OutputOpt,
    ProfileOpt,
    UrlOpt,
    console,
    emit,
    fail,
    hub_options,
    json_arg,
    print_json,
    print_table,
    say,
)
from protocols.messages import MessageType


def agents(
    ctx: typer.Context,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """The registry: each agent, its contract, its replicas and whether they are online."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        page = c.agents_page()
    emit(hub.output, page, _agents_table)


def card(
    ctx: typer.Context,
    agent: Annotated[str, typer.Argument(help="a registered agent id")],
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """An agent's contract as an A2A Agent Card (skills from provides, inputs from requires)."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        found = c.agent_card(agent)
    emit(hub.output, found, _card_table)


def _card_table(found: dict[str, Any]) -> None:
    say(f"{found.get('name')}: {found.get('description') or ''}")
    table = Table(show_edge=False)
    for column in ("skill", "description", "tags"):
        table.add_column(column)
    for s in found.get("skills") or []:
        table.add_row(s.get("id") or "", s.get("description") or "", " ".join(s.get("tags") or []))
    print_table(table)


def _agents_table(page: dict[str, Any]) -> None:
    if not page["data"]:
        say("no agents registered")
        return
    table = Table(show_edge=False)
    for column in ("agent", "kind", "online", "replicas", "requires", "provides", "last seen"):
        table.add_column(column)
    for a in page["data"]:
        contract = a.get("contract") or {}
        replicas = " ".join(
            f"{r['replica']}{'' if r['online'] else '(off)'}" for r in a.get("replicas") or []
        )
        table.add_row(
            a["agent"], a.get("kind") or "", "yes" if a.get("online") else "no", replicas,
            " ".join(contract.get("requires") or []), " ".join(contract.get("provides") or []),
            a.get("last_seen") or "",
        )  # fmt: skip
    print_table(table)


def deadletters(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, max=100, help="a page: 100 at most")] = 100,
    before: Annotated[
        str | None, typer.Option(help="the page before this entry id (the answer's `next`)")
    ] = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Dead-lettered messages, newest first, with the reason each was refused."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        page = c.deadletters(limit, before)
    emit(hub.output, page, _dead_table)


def _dead_table(page: dict[str, Any]) -> None:
    if not page["data"]:
        say("no dead letters")
        return
    table = Table(show_edge=False)
    for column in ("id", "at", "stream", "deliveries", "reason"):
        table.add_column(column, no_wrap=column != "reason")
    for d in page["data"]:
        table.add_row(
            d["id"], d.get("at") or "", d.get("stream") or "", str(d.get("deliveries", 0)),
            d.get("reason") or "",
        )  # fmt: skip
    print_table(table)
    if page.get("next"):
        say(f"older: --before {page['next']}")


def broadcast(
    ctx: typer.Context,
    message_type: Annotated[
        str,
        typer.Argument(
            metavar="TYPE", help="notice, pause, resume or shutdown (broadcast.* also works)"
        ),
    ],
    message: Annotated[
        str | None, typer.Option(help="a notice's text; the reason of a pause, resume, shutdown")
    ] = None,
    payload: Annotated[str | None, typer.Option(help="the whole payload, as JSON")] = None,
    idempotency_key: KeyedOpt = None,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Send a broadcast.* to every replica (pause and resume also gate new GOs)."""
    hub = hub_options(ctx, output, url, api_key, profile)
    full = message_type if "." in message_type else f"broadcast.{message_type}"
    body = json_arg(payload, "--payload") or {}
    if not isinstance(body, dict):
        fail("--payload must be a JSON object")
    if message is not None:  # the payload's field: a notice has `text`, the others `reason`
        body["text" if full == MessageType.BROADCAST_NOTICE.value else "reason"] = message
    with hub.client() as c:
        answer = c.broadcast(full, body, idempotency_key)
    emit(hub.output, answer, lambda a: say(f"sent {full} ({a['sent']})"))


def wiring(
    ctx: typer.Context,
    mermaid: Annotated[bool, typer.Option("--mermaid", help="a Mermaid flowchart")] = False,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Who sends and reads which message types and context keys (JSON, or --mermaid)."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        if mermaid:
            text = c.wiring_mermaid()
            if hub.output is Output.json:
                print_json({"format": "mermaid", "text": text})
            else:
                console.out(text, highlight=False)
            return
        found = c.wiring()
    emit(hub.output, found, _wiring_table)


def _wiring_table(found: dict[str, Any]) -> None:
    """Handoffs and context keys; the message types are the same for every cluster."""
    table = Table(title="handoffs", show_edge=False)
    for column in ("from", "to", "via", "context keys"):
        table.add_column(column)
    for e in found.get("edges") or []:
        if e.get("kind") == "handoff":
            table.add_row(e["from"], e["to"], e.get("via") or "", " ".join(e["context_keys"]))
    print_table(table)
    keys = Table(title="context keys", show_edge=False)
    for column in ("key", "provided by", "required by"):
        keys.add_column(column)
    for k in found.get("context_keys") or []:
        provided = " ".join(k["provided_by"]) or Text("nobody", "red")
        keys.add_row(k["key"], provided, " ".join(k["required_by"]))
    print_table(keys)


def health(
    ctx: typer.Context,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """Is the hub up (exit 0), up without Redis or its engine (exit 1), or absent (exit 2)?"""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        code, body = c.health()
    emit(
        hub.output, body,
        lambda b: say(f"{b['status']}: hub {b['hub_id']}, leader {b['leader']}, "
                      f"redis {'ok' if b['redis'] else 'unreachable'}"),
    )  # fmt: skip
    if code != 200:
        raise typer.Exit(REFUSED)


def metrics(
    ctx: typer.Context,
    output: OutputOpt = Output.table,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
    profile: ProfileOpt = None,
) -> None:
    """The hub's Prometheus metrics (text; -o json: one object per sample)."""
    hub = hub_options(ctx, output, url, api_key, profile)
    with hub.client() as c:
        text = c.metrics()
    if hub.output is Output.json:
        print_json(samples(text))
    else:
        console.out(text.rstrip("\n"), highlight=False)


def samples(text: str) -> list[dict[str, Any]]:
    """Prometheus text as [{name, labels, value}] (via prometheus_client's own parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        {"name": s.name, "labels": dict(s.labels), "value": s.value}
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
