"""`callboard acl AGENT...`: the Redis ACL file: default off, a hub user, one per agent.

Each specialist user may XADD to its own `out` stream only; read, acknowledge and claim on
its own `in` stream (never XADD there); read the broadcast stream; and set its own
done-markers. Nothing else: not the dead-letter stream, not another agent's keys. Key
patterns are exact (`{prefix}in:{agent}`) or end in `:*` after the agent id, never in a
bare `*` (`agent-a*` would also match `agent-ab`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from pathlib import Path
from typing import Annotated

import typer

from protocols.keys import DEFAULT_PREFIX, Keys, is_agent_id

HUB_USER = "hub"
# Everything but what no service needs: the dangerous and admin categories (KEYS, FLUSHALL,
# CONFIG, DEBUG, SHUTDOWN...), with the few harmless connection commands given back.
HUB_COMMANDS = "+@all -@dangerous -@admin +info +client|setname +client|id"
# A specialist's user: connection commands at the root, and one selector per kind of key,
# each granting only what a replica does there (Redis 7 selectors tie commands to keys):
# XADD on its out stream and nowhere else; reading, acknowledging and claiming on its inbox,
# never XADD there (the hub alone writes it; an XADD with a huge explicit id would stop
# every later one); reading the broadcast stream; SET (NX, EX, PX) / GET / EXISTS / DEL on its own
# done-markers. No access to the dead-letter stream: the hub dead-letters on request.
SPECIALIST_ROOT = "+ping +hello +echo +client|setname +client|id +multi +exec +discard"
OUT_COMMANDS = "+xadd"
INBOX_COMMANDS = (
    "+xreadgroup +xack +xclaim +xautoclaim +xpending +xrange +xrevrange +xlen "
    "+xinfo|consumers +xinfo|stream +xinfo|groups +xgroup|create +xgroup|createconsumer"
)
BROADCAST_COMMANDS = "+xread +xrange +xrevrange +xlen +xinfo|stream"
MARKER_COMMANDS = "+set +get +exists +del"
_GLOB = re.compile(r"[*?\[\]\\\s]")


def password() -> str:
    return secrets.token_urlsafe(24)


def hashed(secret: str) -> str:
    """`#<sha256>`: Redis checks the password against the hash; the file holds no secret."""
    return "#" + hashlib.sha256(secret.encode()).hexdigest()


def hub_line(keys: Keys, secret: str) -> str:
    p = keys.prefix
    return f"user {HUB_USER} on {hashed(secret)} resetkeys ~{p}* resetchannels &{p}* {HUB_COMMANDS}"


def specialist_line(keys: Keys, agent: str, secret: str) -> str:
    """Its own streams and markers only, each with only the commands a replica uses there."""
    inbox, out = keys.inbox(agent), keys.out(agent)
    markers = keys.done(agent, "*")
    return (
        f"user {agent} on {hashed(secret)} resetkeys resetchannels -@all {SPECIALIST_ROOT} "
        f"(~{out} -@all {OUT_COMMANDS}) "
        f"(~{inbox} -@all {INBOX_COMMANDS}) "
        f"(%R~{keys.broadcast} -@all {BROADCAST_COMMANDS}) "
        f"(~{markers} -@all {MARKER_COMMANDS})"
    )


def render(agents: list[str], prefix: str, passwords: dict[str, str]) -> str:
    """The ACL file text; `passwords` must hold one for the hub and for every agent."""
    if _GLOB.search(prefix):
        raise ValueError(f"prefix {prefix!r} must not contain glob characters or spaces")
    keys = Keys(prefix)
    lines = ["user default off", hub_line(keys, passwords[HUB_USER])]
    lines += [specialist_line(keys, a, passwords[a]) for a in agents]
    return "\n".join(lines) + "\n"


def acl(
    agents: Annotated[list[str], typer.Argument(metavar="AGENT...", help="agent ids")],
    out: Annotated[Path, typer.Option("--out", help="the ACL file to write")] = Path("users.acl"),
    hub_password: Annotated[
        str | None, typer.Option("--hub-password", envvar="CALLBOARD_HUB_PASSWORD")
    ] = None,
    password_opt: Annotated[
        list[str] | None,
        typer.Option("--password", help="AGENT=SECRET (repeatable); others are generated"),
    ] = None,
    prefix: Annotated[str, typer.Option(envvar="CALLBOARD_PREFIX")] = DEFAULT_PREFIX,
) -> None:
    """Write a Redis ACL file for the hub and these specialists; print generated passwords."""
    given: dict[str, str] = {}
    for pair in password_opt or []:
        name, sep, secret = pair.partition("=")
        if not sep or not secret:
            typer.echo(f"error: --password wants AGENT=SECRET, got {pair!r}", err=True)
            raise typer.Exit(2)
        given[name] = secret
    bad = [a for a in agents if not is_agent_id(a) or a in (HUB_USER, "default")]
    if bad:
        typer.echo(f"error: not usable as agent ids: {', '.join(bad)}", err=True)
        raise typer.Exit(2)
    secrets_ = {HUB_USER: hub_password or given.get(HUB_USER) or password()}
    secrets_.update({a: given.get(a) or password() for a in agents})
    if any(re.search(r"\s", s) for s in secrets_.values()):
        typer.echo("error: passwords must not contain spaces", err=True)
        raise typer.Exit(2)
    try:
        text = render(list(dict.fromkeys(agents)), prefix, secrets_)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    out.write_text(text)
    out.chmod(0o644)  # hashed passwords only; the server may run as another user
    typer.echo(f"wrote {out}")
    for user, secret in secrets_.items():
        if user not in given and not (user == HUB_USER and hub_password):
            typer.echo(f"{user}: {secret}")
