"""What an A2A client's message asks of callboard: which cuelist to run, or, as a reply to
an INPUT_REQUIRED task, which conditions to raise and which armed cues to GO; and how a
run event reads as a status message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from a2a.types import Message
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from hub.a2a.tasks import Need

YES = frozenset({"yes", "y", "ok", "okay", "approve", "approved", "go", "proceed", "continue"})


@dataclass(frozen=True)
class Start:
    cuelist: str
    version: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    dry: bool = False


def data_parts(message: Message) -> list[dict[str, Any]]:
    """The message's data parts that are JSON objects."""
    out = []
    for part in message.parts:
        if part.WhichOneof("content") == "data":
            value = MessageToDict(part.data)
            if isinstance(value, dict):
                out.append(value)
    return out


def text_of(message: Message) -> str:
    return " ".join(p.text for p in message.parts if p.WhichOneof("content") == "text").strip()


def start_of(message: Message) -> Start:
    """The run a new message asks for: metadata `skill`, or a data part `{cuelist: NAME}`
    (with `version`, `params` and `dry` if given)."""
    metadata = MessageToDict(message.metadata) if message.HasField("metadata") else {}
    spec: dict[str, Any] = {}
    for data in data_parts(message):
        if "cuelist" in data:
            spec = data
    name = metadata.get("skill") or spec.get("cuelist")
    if not isinstance(name, str) or not name:
        raise InvalidParamsError(
            'name the cuelist to run: message metadata {"skill": NAME} '
            '(a skill of the agent card) or a data part {"cuelist": NAME}'
        )
    params = spec.get("params") or {}
    version = spec.get("version")
    if not isinstance(params, dict) or not (version is None or isinstance(version, str)):
        raise InvalidParamsError("`params` must be an object and `version` a string")
    return Start(name, version, params, bool(spec.get("dry", False)))


def actions(message: Message, wants: Sequence[Need]) -> list[tuple[str, str]]:
    """(kind, name) pairs a reply asks for: data parts `{condition: NAME}` / `{go: CUE}` (a
    name or a list), else a text naming one thing the run waits for, else, when it waits for
    exactly one thing, a plain yes ("approve", "ok", "go"...)."""
    out: list[tuple[str, str]] = []
    for data in data_parts(message):
        for kind in ("condition", "go"):
            value = data.get(kind)
            names = value if isinstance(value, list) else [value] if value is not None else []
            out += [(kind, str(n)) for n in names]
    if out:
        return out
    text = text_of(message)
    words = text.split()
    by_name = {n.name: n for n in wants}
    named = [by_name[w] for w in words if w in by_name]
    if named:
        return [(n.kind, n.name) for n in named]
    if len(wants) == 1 and text.lower().strip(".! ") in YES:
        return [(wants[0].kind, wants[0].name)]
    options = "; ".join(n.describe() for n in wants) or "nothing an operator can give"
    raise InvalidParamsError(f"say what to give the run: it waits for {options}")


def describe(event: dict[str, Any]) -> str:
    """A run event as one line for a person."""
    kind = event.get("type")
    cue = event.get("cue")
    if kind == "cue":
        reason = f": {event['reason']}" if event.get("reason") else ""
        return f"{cue} {event.get('state')}{reason}"
    if kind == "go":
        return f"{cue} GO (attempt {event.get('attempt')}, fired by {event.get('fired_by')})"
    if kind == "run":
        return f"run {event.get('status')}"
    if kind == "context":
        return f"context {event.get('key')} written by {event.get('source')}"
    if kind == "escalation":
        return f"escalation {event.get('type')} ({event.get('severity')})"
    return f"{kind}: " + ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("type", "at"))
