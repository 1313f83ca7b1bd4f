"""What an A2A client's message asks of callboard: which cuelist to run, or, as a reply to
an INPUT_REQUIRED task, which conditions to raise and which armed cues to GO (at most
MAX_ACTIONS, each checked before any is sent); and how a run event reads as a status
message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from a2a.types import Message
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from hub.a2a.tasks import Need
from hub.api.routes.runs import unwanted_condition, waited_for
from hub.engine.state import RunState
from protocols.cuelist import Cuelist
from protocols.states import CueState

YES = frozenset({"yes", "y", "ok", "okay", "approve", "approved", "go", "proceed", "continue"})
# Names one reply may give: each is a command to the leader with an idempotency key kept a
# day, so a reply naming thousands would cost thousands of both.
MAX_ACTIONS = 16
EXACT_FLOAT_INT = 2**53  # past it a float no longer holds every integer


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
            value = as_sent(MessageToDict(part.data))
            if isinstance(value, dict):
                out.append(value)
    return out


def as_sent(data: Any) -> Any:
    """JSON data read from a protobuf Struct, with its integers back: a Struct holds every
    number as a double, so a client's `3` arrives as 3.0 (and `3.0` too: the two cannot be
    told apart, and a parameter that is a whole number is far more often meant as one)."""
    if isinstance(data, dict):
        return {key: as_sent(value) for key, value in data.items()}
    if isinstance(data, list):
        return [as_sent(value) for value in data]
    if isinstance(data, float) and data.is_integer() and abs(data) <= EXACT_FLOAT_INT:
        return int(data)
    return data


def text_of(message: Message) -> str:
    return " ".join(p.text for p in message.parts if p.WhichOneof("content") == "text").strip()


def start_of(message: Message) -> Start:
    """The run a new message asks for: metadata `skill`, or a data part `{cuelist: NAME}`
    (with `version`, `params` and `dry` if given)."""
    metadata = as_sent(MessageToDict(message.metadata)) if message.HasField("metadata") else {}
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
    dry = spec.get("dry", False)
    if not isinstance(params, dict) or not (version is None or isinstance(version, str)):
        raise InvalidParamsError("`params` must be an object and `version` a string")
    if not isinstance(dry, bool):  # "false" is a string, and bool("false") is True
        raise InvalidParamsError(f"`dry` must be true or false, not {dry!r}")
    return Start(name, version, params, dry)


def actions(message: Message, wants: Sequence[Need]) -> list[tuple[str, str]]:
    """(kind, name) pairs a reply asks for: data parts `{condition: NAME}` / `{go: CUE}` (a
    name or a list), else a text naming one thing the run waits for, else, when it waits for
    exactly one thing, a plain yes ("approve", "ok", "go"...)."""
    out: list[tuple[str, str]] = []
    for data in data_parts(message):
        for kind in ("condition", "go"):
            value = data.get(kind)
            names = value if isinstance(value, list) else [value] if value is not None else []
            if not all(isinstance(n, str) and n for n in names):
                raise InvalidParamsError(f"`{kind}` must be a name or a list of names")
            out += [(kind, n) for n in names]
    if out:
        return _once_each(out)
    text = text_of(message)
    by_name = {n.name: n for n in wants}
    named = [(by_name[w].kind, w) for w in text.split() if w in by_name]
    if named:
        return _once_each(named)
    if len(wants) == 1 and text.lower().strip(".! ") in YES:
        return [(wants[0].kind, wants[0].name)]
    options = "; ".join(n.describe() for n in wants) or "nothing an operator can give"
    raise InvalidParamsError(f"say what to give the run: it waits for {options}")


def _once_each(named: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The actions a reply names, each once; refused past MAX_ACTIONS names (as written: a
    reply naming one thing 2,000 times is refused, not sent 2,000 times)."""
    if len(named) > MAX_ACTIONS:
        raise InvalidParamsError(f"a reply gives at most {MAX_ACTIONS} conditions and GOs")
    return list(dict.fromkeys(named))  # the same one twice is sent once


def check(actions: Sequence[tuple[str, str]], run: RunState, cuelist: Cuelist | None) -> None:
    """Refuse the reply (invalid params) unless every action may be given now, before any
    is sent: a GO to a cue of the run that is armed, a condition a cue of it waits for."""
    wanted = waited_for(cuelist) if cuelist is not None else []
    for kind, name in actions:
        if kind == "go":
            cue = run.cues.get(name)
            if cue is None:
                raise InvalidParamsError(f"run {run.run_id} has no cue {name}")
            if cue.state is not CueState.ARMED:
                why = f": {cue.reason}" if cue.reason else ""
                raise InvalidParamsError(f"cue {name} is not armed: it is {cue.state.value}{why}")
        elif name not in wanted:
            raise InvalidParamsError(str(unwanted_condition(run.run_id, name, wanted)))


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
