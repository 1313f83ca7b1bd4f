"""The built-in specialists (`shell`, `http`, `echo`, `a2a`, `mcp`, `debugger`) and how a KIND name
becomes a class."""

from __future__ import annotations

import importlib

from specialists.base import Specialist

BUILTINS = {
    "shell": "specialists.builtin.shell:Shell",
    "http": "specialists.builtin.http:Http",
    "echo": "specialists.builtin.echo:Echo",
    "a2a": "specialists.builtin.a2a:A2A",
    "mcp": "specialists.builtin.mcp:Mcp",
    "debugger": "specialists.builtin.debugger:Debugger",
}


def load(kind: str) -> type[Specialist]:
    """The Specialist class for `kind`: a built-in name or `package.module:Class`."""
    target = BUILTINS.get(kind, kind)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        known = ", ".join(sorted(BUILTINS))
        raise ValueError(f"unknown specialist kind {kind!r}: use one of {known} or module:Class")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load specialist {kind!r}: {exc}") from exc
    if not (isinstance(found, type) and issubclass(found, Specialist)):
        raise ValueError(f"{kind!r} is not a Specialist subclass")
    return found
