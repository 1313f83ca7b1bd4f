"""Safe YAML (and JSON) loading for cuelists: plain data only, line numbers kept, limits enforced.

The document is built straight from libyaml's event stream rather than composed into nodes:
libyaml's composer recurses in C (deep nesting crashes the process) and its flow scanner
is quadratic in depth, so depth is checked on each start event and the parse stops at once.
Aliases are shared, never copied, and counted at their expanded size, so a billion-laughs
document is refused after a few thousand events. No tag ever constructs an object.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml import events as ev
from yaml.nodes import ScalarNode

from protocols.errors import CuelistError
from protocols.issues import Issue, error

MAX_BYTES = 1 << 20  # 1 MiB of UTF-8
MAX_DEPTH = 64  # nesting of mappings and sequences
MAX_NODES = 1_000_000  # scalars and collections, aliases counted at their expanded size

_Parser: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_T = "tag:yaml.org,2002:"
_STR, _MERGE, _TIMESTAMP = _T + "str", _T + "merge", _T + "timestamp"
_COLLECTION_TAGS = {None, "!", _T + "map", _T + "seq"}
_SCALAR_TAGS = {_STR, _T + "int", _T + "float", _T + "bool", _T + "null", _TIMESTAMP}
_OPEN = object()  # an anchored collection still being built: an alias to it is recursive
_IMPLICIT: dict[Any, list[Any]] = yaml.resolver.Resolver.yaml_implicit_resolvers
_CONSTRUCT = yaml.constructor.SafeConstructor()
_plain_cache: dict[str, Any] = {}

# roles of a collection, for recording line numbers
_ROOT, _TOP, _CUES, _CUE, _OTHER = range(5)


@dataclass
class LineMap:
    """1-based line numbers: of top-level keys, of keys one level below them, of each cue
    item and of each key inside a cue. Lookups fall back to the nearest enclosing line."""

    top: dict[str, int] = field(default_factory=dict)
    nested: dict[tuple[str, str | int], int] = field(default_factory=dict)
    cues: list[int] = field(default_factory=list)
    cue_keys: dict[int, dict[str, int]] = field(default_factory=dict)

    def cue(self, index: int, key: str | None = None) -> int | None:
        if key is not None:
            found = self.cue_keys.get(index, {}).get(key)
            if found is not None:
                return found
        return self.cues[index] if 0 <= index < len(self.cues) else self.top.get("cues")

    def at(self, loc: tuple[str | int, ...]) -> int | None:
        """The line of a pydantic-style location such as `("cues", 3, "depends_on", 0)`."""
        if not loc or not isinstance(loc[0], str):
            return None
        head = loc[0]
        if head == "cues" and len(loc) > 1 and isinstance(loc[1], int):
            key = loc[2] if len(loc) > 2 and isinstance(loc[2], str) else None
            return self.cue(loc[1], key)
        if len(loc) > 1 and (head, loc[1]) in self.nested:
            return self.nested[(head, loc[1])]
        return self.top.get(head)


@dataclass
class Document:
    """What was loaded: plain JSON-compatible data, its lines, and non-fatal issues."""

    data: Any
    lines: LineMap
    issues: list[Issue]


class _Fatal(Exception):
    def __init__(self, code: str, message: str, line: int | None) -> None:
        super().__init__(message)
        self.issue = error(code, message, line=line)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector rescans the young containers over and over while a large
    document and its models grow, which makes validation two to five times slower; what
    is built here forms no cycles, and whatever garbage there is waits a fraction of a
    second for the next collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load(text: str, file: str | None = None) -> Document:
    """Load one YAML (or JSON) document; raises CuelistError with one issue when unusable."""
    try:
        size = len(text) if len(text) * 4 <= MAX_BYTES else len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        issue = error("bad_encoding", f"the text is not valid Unicode: {exc.reason}")
        raise _refuse(file, issue) from None
    if size > MAX_BYTES:
        raise _refuse(file, error("too_large", f"{size} bytes, over the {MAX_BYTES} limit"))
    builder = _Builder()
    try:
        with paused_gc():
            data = builder.run(_Parser(text))
    except _Fatal as exc:
        raise _refuse(file, exc.issue) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        fallback = _json_fallback(text)
        if fallback is not None:
            return fallback
        raise _refuse(file, error("bad_yaml", f"not valid YAML: {what}", line=line)) from None
    except UnicodeError as exc:
        issue = error("bad_encoding", f"the text is not valid Unicode: {exc}")
        raise _refuse(file, issue) from None
    except (yaml.YAMLError, ValueError) as exc:
        raise _refuse(file, error("bad_yaml", f"not valid YAML: {exc}")) from None
    return Document(data, builder.lines, builder.issues)


def _json_fallback(text: str) -> Document | None:
    """JSON that libyaml (YAML 1.1) refuses, e.g. a key over 1,024 characters."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        data, duplicates = _json(text)
    except (ValueError, RecursionError):
        return None
    check_plain(data)
    return Document(data, LineMap(), [_duplicate(key, None) for key in duplicates])


def parse_json(body: str | bytes) -> Document:
    """A JSON document (an API body), held to YAML's rule: a key twice in one object is an
    error naming the key, with its line when the YAML reader can place it. Raises
    ValueError (not JSON) or RecursionError (nested too deeply); limits are check_plain's."""
    data, duplicates = _json(body)
    issues = [_duplicate(key, None) for key in duplicates]
    if duplicates:  # rare: worth a second read to name the lines
        try:
            text = body.decode("utf-8") if isinstance(body, bytes) else body
            placed = [i for i in load(text).issues if i.code == "duplicate_key"]
        except (CuelistError, UnicodeError):
            placed = []
        if len(placed) == len(issues):
            issues = placed
    return Document(data, LineMap(), issues)


def _json(text: str | bytes) -> tuple[Any, list[str]]:
    """json.loads, also returning every key that appeared twice in one object."""
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in items:
            if key in obj:
                duplicates.append(key)
            obj[key] = value
        return obj

    data = json.loads(text, object_pairs_hook=pairs, parse_constant=_no_constant)
    return data, duplicates


def _duplicate(key: str, line: int | None) -> Issue:
    shown = key if len(key) <= 80 else key[:77] + "..."
    return error("duplicate_key", f"key '{shown}' appears twice in one mapping", line=line)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON can carry")


def _refuse(file: str | None, issue: Issue) -> CuelistError:
    return CuelistError([issue.model_copy(update={"file": file})])


def check_plain(data: Any) -> None:
    """The same limits for data that did not come through `load` (a JSON body): depth,
    size, string keys, finite numbers, text UTF-8 can carry (JSON's `\\ud83d` alone is
    none). Raises CuelistError when one is crossed."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > MAX_DEPTH or count > MAX_NODES:
            what = "deeper than" if depth > MAX_DEPTH else "more nodes than"
            limit = MAX_DEPTH if depth > MAX_DEPTH else MAX_NODES
            raise _refuse(None, error("too_large", f"the document is {what} {limit}"))
        if isinstance(item, dict):
            for key, value in item.items():
                if not isinstance(key, str):
                    raise _refuse(None, error("bad_yaml", f"mapping key {key!r} is not a string"))
                _check_text(key)
                stack.append((value, depth + 1))
        elif isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise _refuse(None, error("bad_value", f"{item} is not a number JSON can carry"))
        elif isinstance(item, str):
            _check_text(item)


def _check_text(text: str) -> None:
    """Refuse a string holding a lone surrogate (UTF-8 has no bytes for it)."""
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            at = f"{text[: exc.start][-20:]!r}"
            message = f"a string holds a lone surrogate (not UTF-8) after {at}"
            raise _refuse(None, error("bad_value", message)) from None


class _Frame:
    __slots__ = ("anchor", "index", "is_map", "key", "merges", "obj", "role", "start", "top")

    def __init__(self, obj: Any, role: int, anchor: str | None, start: int) -> None:
        self.obj = obj
        self.is_map = isinstance(obj, dict)
        self.role = role
        self.anchor = anchor
        self.start = start
        self.key: Any = None  # the pending key of a mapping, None while expecting a key
        self.merges: list[dict[str, Any]] = []
        self.top = ""  # the top-level key this collection is the value of
        self.index = -1  # the cue index of a cue mapping


class _Builder:
    def __init__(self) -> None:
        self.lines = LineMap()
        self.issues: list[Issue] = []
        self.anchors: dict[str, Any] = {}
        self.count = 0
        self.stack: list[_Frame] = []
        self.result: Any = None
        self.documents = 0

    def run(self, parser: Any) -> Any:
        try:
            while True:
                event = parser.get_event()
                kind = type(event)
                if kind is ev.ScalarEvent:
                    self.count += 1
                    value = self._scalar(event)
                    if event.anchor is not None:
                        self.anchors[event.anchor] = (value, 1)
                    self._add(value, event)
                elif kind is ev.MappingStartEvent or kind is ev.SequenceStartEvent:
                    self._start(event, {} if kind is ev.MappingStartEvent else [])
                elif kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
                    self._end()
                elif kind is ev.AliasEvent:
                    self._alias(event)
                elif kind is ev.DocumentStartEvent:
                    self.documents += 1
                    if self.documents > 1:
                        raise _Fatal(
                            "bad_yaml", "a cuelist file holds one YAML document", _line(event)
                        )
                elif kind is ev.StreamEndEvent:
                    return self.result
        finally:
            parser.dispose()

    def _check(self, event: Any) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise _Fatal("too_large", f"nested deeper than {MAX_DEPTH} levels", _line(event))
        if self.count > MAX_NODES:
            raise _Fatal(
                "too_large", f"over {MAX_NODES} nodes (aliases counted expanded)", _line(event)
            )

    def _start(self, event: Any, obj: Any) -> None:
        self.count += 1
        self._check(event)
        if event.tag not in _COLLECTION_TAGS:
            raise _Fatal("unsupported_tag", _tag_message(event.tag), _line(event))
        parent = self.stack[-1] if self.stack else None
        if parent is not None and parent.is_map and parent.key is None:
            raise _Fatal("bad_yaml", "a mapping key must be a plain string", _line(event))
        role, top, index = _OTHER, "", -1
        if parent is None:
            role = _ROOT if isinstance(obj, dict) else _OTHER
        elif parent.role == _ROOT:
            top = parent.key
            role = _CUES if top == "cues" and isinstance(obj, list) else _TOP
        elif parent.role == _CUES and isinstance(obj, dict):
            role, index = _CUE, len(parent.obj)
        if parent is not None and parent.role == _CUES:
            self.lines.cues.append(_line(event))
        elif parent is not None and parent.role == _TOP and not parent.is_map:
            self.lines.nested[(parent.top, len(parent.obj))] = _line(event)
        frame = _Frame(obj, role, event.anchor, self.count)
        frame.top, frame.index = top, index
        if event.anchor is not None:
            self.anchors[event.anchor] = _OPEN
        self.stack.append(frame)

    def _end(self) -> None:
        frame = self.stack.pop()
        for source in frame.merges:  # YAML merge keys: explicit keys win, earlier merges win
            for key, value in source.items():
                frame.obj.setdefault(key, value)
        if frame.anchor is not None:
            self.anchors[frame.anchor] = (frame.obj, self.count - frame.start + 1)
        self._attach(frame.obj)

    def _alias(self, event: Any) -> None:
        found = self.anchors.get(event.anchor)
        if found is None:
            raise _Fatal("bad_yaml", f"alias *{event.anchor} names no anchor", _line(event))
        if found is _OPEN:
            raise _Fatal("bad_yaml", f"alias *{event.anchor} refers to itself", _line(event))
        value, size = found
        self.count += size
        self._check(event)
        self._add(value, event, alias=True)

    def _add(self, value: Any, event: Any, alias: bool = False) -> None:
        """A scalar or alias in place: a key when the mapping expects one, else a value."""
        frame = self.stack[-1] if self.stack else None
        if frame is not None and frame.is_map and frame.key is None:
            if alias or type(value) is dict or type(value) is list:
                raise _Fatal("bad_yaml", "a mapping key must be a plain string", _line(event))
            self._key(frame, event)
            return
        if frame is not None and not frame.is_map:
            if frame.role == _CUES:
                self.lines.cues.append(_line(event))
            elif frame.role == _TOP:
                self.lines.nested[(frame.top, len(frame.obj))] = _line(event)
        self._attach(value)

    def _key(self, frame: _Frame, event: Any) -> None:
        key = event.value  # keys stay the text written: `on:` and `1:` are strings
        if key == "<<" and event.implicit[0] and event.tag is None:
            frame.key = _MERGE
            return
        if key in frame.obj:
            self.issues.append(_duplicate(key, _line(event)))
        frame.key = key
        role = frame.role
        if role == _ROOT:
            self.lines.top[key] = _line(event)
        elif role == _CUE:
            self.lines.cue_keys.setdefault(frame.index, {})[key] = _line(event)
        elif role == _TOP:
            self.lines.nested[(frame.top, key)] = _line(event)

    def _attach(self, value: Any) -> None:
        if not self.stack:
            self.result = value
            return
        frame = self.stack[-1]
        if not frame.is_map:
            frame.obj.append(value)
            return
        key, frame.key = frame.key, None
        if key is _MERGE:
            sources = value if type(value) is list else [value]
            if not all(type(s) is dict for s in sources):
                raise _Fatal("bad_yaml", "a merge key (<<) takes a mapping or a list of them", None)
            frame.merges.extend(sources)
        else:
            frame.obj[key] = value

    def _scalar(self, event: Any) -> Any:
        tag, value = event.tag, event.value
        if tag is None or tag == "!":
            if not event.implicit[0]:  # quoted
                return value
            found = _plain_cache.get(value, _OPEN)
            if found is _OPEN:
                found = _resolve_plain(value, _line(event))
                if len(value) <= 64 and len(_plain_cache) < 100_000:
                    _plain_cache[value] = found
            return found
        if tag not in _SCALAR_TAGS:
            raise _Fatal("unsupported_tag", _tag_message(tag), _line(event))
        return _construct(tag, value, _line(event))


def _resolve_plain(value: str, line: int) -> Any:
    resolvers = _IMPLICIT.get(value[0] if value else "", []) + _IMPLICIT.get(None, [])
    for tag, pattern in resolvers:
        if pattern.match(value):
            return value if tag == _MERGE else _construct(tag, value, line)
    return value


def _construct(tag: str, value: str, line: int) -> Any:
    if tag in (_STR, _TIMESTAMP):  # dates stay the text written: JSON has no date type
        return value
    try:
        result = _CONSTRUCT.yaml_constructors[tag](_CONSTRUCT, ScalarNode(tag, value))
    except (yaml.YAMLError, ArithmeticError, LookupError, TypeError, ValueError) as exc:
        raise _Fatal(
            "bad_yaml", f"{value!r} is not a valid {tag.rsplit(':', 1)[-1]}", line
        ) from exc
    if isinstance(result, float) and not math.isfinite(result):
        raise _Fatal("bad_value", f"{value!r} is not a finite number", line)
    return result


def _tag_message(tag: str | None) -> str:
    return f"tag {tag!r} is not allowed: a cuelist is plain data (mappings, lists, scalars)"


def _line(event: Any) -> int:
    return int(event.start_mark.line) + 1
