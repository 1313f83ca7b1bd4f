"""The layers hold: Redis is reached only through the storage layer and the transport, and
every key is spelled in protocols/keys.py alone.

Read from the source (AST), in the style of tests/protocols/test_messages.py. Each check
also runs on a few lines of bad code, so a check that finds nothing is known to look.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from redis.commands import core

from protocols.keys import DEFAULT_PREFIX
from protocols.transport import Gateway, Storage

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocols", "hub", "specialists", "callboard")
# The storage layer (typed stores built on protocols.transport.Storage) and the transport.
LAYER = ("protocols/transport/", "hub/store/", "specialists/markers.py")
# Names a module needs to reach Redis directly; outside the layer it holds a Transport or
# a store instead.
HANDLES = {"Redis", "connect", "Gateway", "Storage", "Pipeline", "Script"}

# Redis command methods: redis-py's (streams, hashes, sets, sorted sets, lists, keys,
# scans, scripts) and the gateway's. Names that are also everyday methods (`get`, `set`,
# `delete`...) count only when called on something named like a Redis handle.
_MIXINS = (
    core.StreamCommands, core.HashCommands, core.SortedSetCommands, core.SetCommands,
    core.ListCommands, core.ScanCommands, core.ScriptCommands, core.BasicKeyCommands,
)  # fmt: skip
_COMMANDS = {n for m in _MIXINS for n in vars(m) if not n.startswith("_")}
_COMMANDS |= {n for cls in (Storage, Gateway) for n in vars(cls) if not n.startswith("_")}
_COMMANDS |= {"execute_command", "pipeline", "register_script"}
_EVERYDAY = {n for t in (dict, list, set, str, bytes, object) for n in dir(t)} | {
    "get", "set", "delete", "exists", "type", "time", "keys", "copy", "move", "rename",
    "dump", "sort", "append", "lock", "scan", "echo", "ping", "command", "script", "touch",
    "unlink", "persist", "expire", "restore", "substr", "strlen", "randomkey", "close",
    "sharing", "digest",  # hashlib's; Redis 8 has a DIGEST command too
}  # fmt: skip
REDIS_METHODS = _COMMANDS - _EVERYDAY
REDIS_EVERYDAY = _COMMANDS & _EVERYDAY
REDIS_RECEIVERS = {"client", "redis", "db", "_db", "storage", "gateway", "pipe"}

# A key spelled out: a piece of a string without spaces (log lines and messages have
# them) that holds a key word next to a `:` or a hash-tag brace, the default prefix, or a
# key word glued to something with `+`.
_HEADS = (
    "out|in|done|hub|run|runs|esc|escs|idem|schedule|cuelist|cuelists|agents|resources"
    "|paused|broadcast|dead|audit"
)
_TAILS = "events|context|versions|leader|fence|commands|active|commit|reply|all"
KEYISH = re.compile(rf"(?:^|[:{{}}])(?:{_HEADS})[:{{]|:(?:{_TAILS})(?:$|:)")
KEY_WORD = re.compile(rf"^(?:{_HEADS})(?::|$)")


def _modules(folders: tuple[str, ...]) -> Iterator[tuple[str, ast.Module]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), filename=str(path))


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def redis_reach(tree: ast.Module) -> list[tuple[int, str]]:
    """Where `tree` imports redis, takes a Redis handle, or calls a Redis command."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"imports {a.name}") for a in node.names if _is_redis(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_redis(node.module):
                found.append((node.lineno, f"imports {node.module}"))
            elif node.module.startswith("protocols.transport"):
                taken = sorted({a.name for a in node.names} & HANDLES)
                found += [(node.lineno, f"takes {name} from the transport") for name in taken]
        elif isinstance(node, ast.Attribute) and node.attr in ("client", "_client"):
            if "transport" in _receiver(node.value) or _receiver(node.value) == "t":
                found.append((node.lineno, f"reaches the transport's .{node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, on = node.func.attr, _receiver(node.func.value)
            if name in REDIS_METHODS or (name in REDIS_EVERYDAY and on in REDIS_RECEIVERS):
                found.append((node.lineno, f"calls .{name}() on {on or 'an expression'}"))
    return found


def _is_redis(module: str) -> bool:
    return module == "redis" or module.startswith("redis.")


def key_spellings(tree: ast.Module) -> list[tuple[int, str]]:
    """Where `tree` spells a key (or a piece of one) instead of asking protocols.keys."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if not any(c.isspace() for c in text) and (
                KEYISH.search(text) or text.startswith(DEFAULT_PREFIX)
            ):
                found.append((node.lineno, text))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                text = side.value if isinstance(side, ast.Constant) else None
                if isinstance(text, str) and KEY_WORD.match(text):
                    found.append((node.lineno, text))
    return found


def test_redis_is_reached_only_through_the_storage_layer_and_the_transport() -> None:
    offenders = [
        f"{name}:{line}: {what}"
        for name, tree in _modules(PACKAGES)
        if not name.startswith(LAYER)
        for line, what in redis_reach(tree)
    ]
    assert offenders == [], "go through a store of hub/store/ (or the Transport)"


def test_no_key_is_spelled_outside_protocols_keys() -> None:
    offenders = [
        f"{name}:{line}: {text!r}"
        for name, tree in _modules((*PACKAGES, "bench"))
        if name != "protocols/keys.py"
        for line, text in key_spellings(tree)
    ]
    assert offenders == [], "name the key in protocols.keys.Keys and call it"


def test_the_checks_find_what_they_look_for() -> None:
    """Each check, run on code that breaks its rule, finds every line (none is vacuous)."""
    reach = ast.parse(
        "import redis\n"
        "from redis.asyncio import Redis\n"
        "from protocols.transport import Storage, Transport\n"
        "await hub.transport.client.ping()\n"
        "await client.hgetall(key)\n"
        "await self.db.get(key)\n"
        "pipe.xadd(stream, fields)\n"
        "settings.get('x')\n"  # an everyday .get on something else: not a Redis call
    )
    assert sorted({line for line, _ in redis_reach(reach)}) == [1, 2, 3, 4, 5, 6, 7]
    spelled = ast.parse(
        "f'{prefix}run:{run_id}'\n"
        "f'{prefix}out:{{{agent}}}'\n"
        "'cb:agents'\n"
        "prefix + 'agents'\n"
        "key + ':versions'\n"
        "f'{prefix}hub:reply:{command_id}'\n"
        "log.warning('hub %s: %s; following again', hub, exc)\n"  # a message, not a key
        "router = APIRouter(prefix='/agents', tags=['agents'])\n"
    )
    assert sorted({line for line, _ in key_spellings(spelled)}) == [1, 2, 3, 4, 5, 6]
