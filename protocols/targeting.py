"""Targets by capability: agent labels, the `target:` of a cue, its filter language, matching.

    target: {provides: [code_review], count: 1}
    target: {filter: "labels.gpu AND NOT labels.busy", count: 2}

The filter is a small expression language (seed 004's `target_filter`), parsed here by
hand (never `eval`) into a tree that is evaluated against one agent at a time:

    expr    := or
    or      := and ("OR" and)*
    and     := not ("AND" not)*
    not     := "NOT" not | "(" expr ")" | check
    check   := operand [("==" | "!=" | "<" | "<=" | ">" | ">=" | "in") operand]
    operand := field | number | 'string' | "string" | true | false | [value, ...] | word

Fields: `name` (or `agent`), `kind`, `provides`, `requires`, `handoff_to` (lists) and
`labels.KEY`. A word that is not a field is a string (`provides == code_review`). A field
alone is a truth test (`labels.gpu`: present and truthy; a list: not empty). `==` / `!=`
against a list field test membership; `x in LIST` is membership in a list field or a list
literal. Comparing values of different types is false, never an error; a missing label
compares false. Keywords may be written in either case (`AND`, `and`). Every problem is
a FilterError naming the 1-based position.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from protocols.errors import FilterError

# -- labels ------------------------------------------------------------------------------
LABEL_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
LABELS_MAX = 32  # labels one agent may register (specialists are untrusted)
LABEL_VALUE_CHARS = 256
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
# a number is finite: NaN is written to Redis as null, which reads back as no label value
Finite = Annotated[StrictFloat, Field(allow_inf_nan=False)]
# an int is a 64-bit one: what tools reading a contract take (an A2A card's Struct turns
# numbers into doubles, and raised on an int past a double's range)
Int64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]
LabelValue = StrictBool | Int64 | Finite | Annotated[str, Field(max_length=256)]
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=LABELS_MAX)]
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)


def parse_labels(text: str) -> dict[str, str | int | float | bool]:
    """`gpu=true,zone=eu,mem_gb=16` -> {"gpu": True, "zone": "eu", "mem_gb": 16}: true and
    false are booleans, numbers are numbers, anything else a string. ValueError if malformed."""
    out: dict[str, str | int | float | bool] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not _LABEL_KEY.match(key):
            raise ValueError(f"bad label {part!r}: write key=value (key: letters, digits, _ -)")
        out[key] = _scalar(raw)
    if len(out) > LABELS_MAX:
        raise ValueError(f"{len(out)} labels, over the limit of {LABELS_MAX}")
    return out


def _scalar(raw: str) -> str | int | float | bool:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        number = float(raw)
    except ValueError:
        return raw[:LABEL_VALUE_CHARS]
    return number if math.isfinite(number) else raw


# -- the filter language -----------------------------------------------------------------
MAX_FILTER_CHARS = 1000
MAX_DEPTH = 32  # nested parentheses and NOTs
MAX_LIST = 100
LIST_FIELDS = frozenset({"provides", "requires", "handoff_to"})
TEXT_FIELDS = frozenset({"name", "agent", "kind"})
FIELDS_HELP = "name, kind, provides, requires, handoff_to or labels.KEY"
_KEYWORDS = {"and": "AND", "or": "OR", "not": "NOT", "in": "in", "true": True, "false": False}
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![A-Za-z0-9_.-]))
      | (?P<word>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_][A-Za-z0-9_-]*)*)
      | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<op>==|!=|<=|>=|<|>)
      | (?P<punct>[()\[\],])
    """,
    re.VERBOSE,
)
Value = str | int | float | bool


@dataclass(frozen=True)
class Tok:
    kind: str  # num, word, str, op, punct, kw, end
    value: Any
    pos: int  # 1-based


@dataclass(frozen=True)
class FieldRef:
    path: str  # "provides", "labels.gpu"


@dataclass(frozen=True)
class Literal:
    value: Value | tuple[Value, ...]


Operand = FieldRef | Literal


@dataclass(frozen=True)
class Check:
    left: Operand
    op: str | None = None  # None: a truth check of `left`
    right: Operand | None = None


@dataclass(frozen=True)
class Not:
    item: Node


@dataclass(frozen=True)
class AllOf:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Node, ...]


Node = Check | Not | AllOf | AnyOf


def _tokens(text: str) -> list[Tok]:
    out: list[Tok] = []
    i = 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            ch = text[i]
            if ch in "'\"":
                raise FilterError("a string is not closed", i + 1)
            if ch == "=":
                raise FilterError("'=' is not an operator: write ==", i + 1)
            raise FilterError(f"unexpected character {ch!r}", i + 1)
        kind, raw = m.lastgroup or "", m.group()
        pos = i + 1
        i = m.end()
        if kind == "ws":
            continue
        if kind == "num":
            number = float(raw) if any(c in raw for c in ".eE") else int(raw)
            if isinstance(number, float) and not math.isfinite(number):
                raise FilterError(f"number {raw} is out of range", pos)
            out.append(Tok("num", number, pos))
        elif kind == "word" and raw.lower() in _KEYWORDS:
            out.append(Tok("kw", _KEYWORDS[raw.lower()], pos))
        elif kind == "str":
            out.append(Tok("str", re.sub(r"\\(.)", r"\1", raw[1:-1], flags=re.S), pos))
        else:
            out.append(Tok(kind, raw, pos))
    out.append(Tok("end", None, len(text) + 1))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def take(self) -> Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def kw(self, word: str) -> bool:
        if self.tok.kind == "kw" and self.tok.value == word:
            self.i += 1
            return True
        return False

    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise FilterError("the filter is empty", 1)
        node = self.any_of()
        if self.tok.kind != "end":
            raise FilterError(f"expected AND, OR or the end, found {_show(self.tok)}", self.tok.pos)
        return node

    def any_of(self) -> Node:
        items = [self.all_of()]
        while self.kw("OR"):
            items.append(self.all_of())
        return items[0] if len(items) == 1 else AnyOf(tuple(items))

    def all_of(self) -> Node:
        items = [self.negation()]
        while self.kw("AND"):
            items.append(self.negation())
        return items[0] if len(items) == 1 else AllOf(tuple(items))

    def negation(self) -> Node:
        start = self.tok
        if not (start.kind == "kw" and start.value == "NOT") and not (
            start.kind == "punct" and start.value == "("
        ):
            return self.test()
        self.depth += 1  # a NOT or a parenthesis: one level deeper
        if self.depth > MAX_DEPTH:
            raise FilterError(f"nested deeper than {MAX_DEPTH}", start.pos)
        try:
            if self.kw("NOT"):
                return Not(self.negation())
            self.take()  # the (
            node = self.any_of()
            if not (self.tok.kind == "punct" and self.tok.value == ")"):
                raise FilterError(
                    f"expected ) to close the ( at position {start.pos}, found {_show(self.tok)}",
                    self.tok.pos,
                )
            self.take()
            return node
        finally:
            self.depth -= 1

    def test(self) -> Node:
        left_tok = self.tok
        left = self.operand()
        if self.tok.kind == "op" or (self.tok.kind == "kw" and self.tok.value == "in"):
            op_tok = self.take()
            right_tok = self.tok
            right = self.operand()
            _check(left, op_tok, right, left_tok, right_tok)
            return Check(left, str(op_tok.value), right)
        if not isinstance(left, FieldRef):
            raise FilterError(
                f"{_show(left_tok)} is not a condition: name a field ({FIELDS_HELP}) or "
                "compare one",
                left_tok.pos,
            )
        return Check(left)

    def operand(self) -> Operand:
        tok = self.take()
        if tok.kind == "word":
            return _field(tok) if _is_field(tok.value) else Literal(tok.value)
        if tok.kind in ("num", "str") or (tok.kind == "kw" and isinstance(tok.value, bool)):
            return Literal(tok.value)
        if tok.kind == "punct" and tok.value == "[":
            return Literal(self.items(tok))
        raise FilterError(f"expected a field or a value, found {_show(tok)}", tok.pos)

    def items(self, opening: Tok) -> tuple[Value, ...]:
        values: list[Value] = []
        if self.tok.kind == "punct" and self.tok.value == "]":
            self.take()
            return ()
        while True:
            tok = self.take()
            if tok.kind in ("num", "str", "word") or (
                tok.kind == "kw" and isinstance(tok.value, bool)
            ):
                values.append(tok.value)
            else:
                raise FilterError(f"expected a value in the list, found {_show(tok)}", tok.pos)
            if len(values) > MAX_LIST:
                raise FilterError(f"a list of more than {MAX_LIST} values", opening.pos)
            sep = self.take()
            if sep.kind == "punct" and sep.value == "]":
                return tuple(values)
            if not (sep.kind == "punct" and sep.value == ","):
                raise FilterError(f"expected , or ] in the list, found {_show(sep)}", sep.pos)


def _is_field(word: str) -> bool:
    return word in LIST_FIELDS or word in TEXT_FIELDS or word.startswith("labels.")


def _field(tok: Tok) -> FieldRef:
    path = str(tok.value)
    if path.startswith("labels."):
        key = path.removeprefix("labels.")
        if not _LABEL_KEY.match(key):
            raise FilterError(f"{key!r} is not a label key (letters, digits, _ -)", tok.pos)
    return FieldRef(path)


def _check(left: Operand, op: Tok, right: Operand, left_tok: Tok, right_tok: Tok) -> None:
    if not isinstance(left, FieldRef) and not isinstance(right, FieldRef):
        raise FilterError(f"the comparison names no field ({FIELDS_HELP})", left_tok.pos)
    if op.value == "in":
        list_field = isinstance(right, FieldRef) and right.path in LIST_FIELDS
        list_literal = isinstance(right, Literal) and isinstance(right.value, tuple)
        if not (list_field or list_literal):
            raise FilterError(
                "in needs a list on its right: provides, requires, handoff_to or [a, b]",
                right_tok.pos,
            )
    for side, tok in ((left, left_tok), (right, right_tok)):
        if op.value != "in" and isinstance(side, Literal) and isinstance(side.value, tuple):
            raise FilterError(f"a list can only follow in, not {op.value}", tok.pos)


def _show(tok: Tok) -> str:
    if tok.kind == "end":
        return "the end"
    if tok.kind == "str":
        return repr(tok.value)
    return f"'{tok.value}'" if not isinstance(tok.value, bool) else str(tok.value).lower()


@functools.lru_cache(maxsize=1024)
def parse_filter(text: str) -> Node:
    """The tree of a filter expression; FilterError (with a position) if it does not parse."""
    if not isinstance(text, str):
        raise FilterError("a filter is a string", 1)
    if len(text) > MAX_FILTER_CHARS:
        raise FilterError(f"longer than {MAX_FILTER_CHARS} characters", MAX_FILTER_CHARS + 1)
    return _Parser(text).parse()


# -- what a filter is evaluated against --------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One agent as targeting sees it: its id, kind, contract lists and labels."""

    name: str
    kind: str = ""
    provides: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    handoff_to: tuple[str, ...] = ()
    labels: Mapping[str, Value] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, contract: Mapping[str, Any], kind: str = "") -> Candidate:
        """From a contract as JSON (the registry's record of `status.online`)."""

        def strings(key: str) -> tuple[str, ...]:
            raw = contract.get(key) or ()
            return tuple(str(x) for x in raw) if isinstance(raw, list | tuple) else ()

        raw = contract.get("labels")
        labels = dict(raw) if isinstance(raw, dict) else {}
        return cls(
            name=name, kind=kind, provides=strings("provides"), requires=strings("requires"),
            handoff_to=strings("handoff_to"), labels=labels,
        )  # fmt: skip

    def get(self, path: str) -> Value | tuple[str, ...] | None:
        if path.startswith("labels."):
            return self.labels.get(path.removeprefix("labels."))
        if path in ("name", "agent"):
            return self.name
        value: Value | tuple[str, ...] = getattr(self, path)
        return value


def evaluate(node: Node, agent: Candidate) -> bool:
    """Whether `agent` satisfies the filter tree."""
    if isinstance(node, AnyOf):
        return any(evaluate(n, agent) for n in node.items)
    if isinstance(node, AllOf):
        return all(evaluate(n, agent) for n in node.items)
    if isinstance(node, Not):
        return not evaluate(node.item, agent)
    left = _value(node.left, agent)
    if node.op is None or node.right is None:
        return bool(left)
    right = _value(node.right, agent)
    listed = isinstance(node.left, FieldRef) and node.left.path in LIST_FIELDS
    listed_right = isinstance(node.right, FieldRef) and node.right.path in LIST_FIELDS
    if node.op == "in":
        if not isinstance(right, tuple):
            return False
        items = left if isinstance(left, tuple) else (left,)
        return any(_same(x, y) for x in items for y in right)
    if node.op in ("==", "!="):
        if listed or listed_right:
            seq, one = (left, right) if listed else (right, left)
            found = isinstance(seq, tuple) and any(_same(one, x) for x in seq)
        else:
            found = _same(left, right)
        return found if node.op == "==" else not found
    return _order(node.op, left, right)


def _value(operand: Operand, agent: Candidate) -> Any:
    return agent.get(operand.path) if isinstance(operand, FieldRef) else operand.value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _order(op: str, a: Any, b: Any) -> bool:
    if not ((_number(a) and _number(b)) or (isinstance(a, str) and isinstance(b, str))):
        return False
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


# -- the `target:` of a cue ---------------------------------------------------------------
def _unique(items: list[str]) -> list[str]:
    if len(set(items)) != len(items):
        raise PydanticCustomError("duplicate_item", "a capability is listed twice")
    return items


Capability = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class Target(BaseModel):
    """Which online agents a cue goes to, chosen when it fires: every agent that provides
    all of `provides` and satisfies `filter`; `count` of them (default: all that match)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provides: Annotated[list[Capability], Field(max_length=50), AfterValidator(_unique)] = Field(
        default_factory=list
    )
    filter: Annotated[str, StringConstraints(max_length=MAX_FILTER_CHARS)] | None = None
    count: Annotated[StrictInt, Field(ge=1, le=100)] | None = None

    @field_validator("filter")
    @classmethod
    def _parses(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_filter(value)
            except FilterError as exc:
                raise PydanticCustomError("bad_filter", "{error}", {"error": str(exc)}) from None
        return value

    @model_validator(mode="after")
    def _says_something(self) -> Target:
        if not self.provides and self.filter is None:
            raise PydanticCustomError("empty_target", "a target needs provides, filter or both")
        return self

    def matches(self, agent: Candidate) -> bool:
        if any(cap not in agent.provides for cap in self.provides):
            return False
        return self.filter is None or evaluate(parse_filter(self.filter), agent)

    def describe(self) -> str:
        """`{provides: [code_review], count: 1}`, as a cue's reason quotes it."""
        parts = []
        if self.provides:
            parts.append(f"provides: [{', '.join(self.provides)}]")
        if self.filter is not None:
            parts.append(f'filter: "{self.filter}"')
        if self.count is not None:
            parts.append(f"count: {self.count}")
        return "{" + ", ".join(parts) + "}"


def matching(target: Target, candidates: Iterable[Candidate]) -> list[str]:
    """The names of the candidates that match `target`, sorted: what `choose` chooses among."""
    return sorted(c.name for c in candidates if target.matches(c))


def choose(
    target: Target, matching: list[str], load: Callable[[str], int],
    last_chosen: Mapping[str, int],
) -> tuple[list[str], list[str]]:  # fmt: skip
    """(chosen agents, every matching agent), among the `matching` ones. All of them when
    `count` is unset; else the `count` least loaded (fewest cues in a call), then least
    recently chosen, then by name: deterministic for a given history. Chosen is empty when
    fewer than `count` match."""
    if target.count is None:
        return matching, matching
    if len(matching) < target.count:
        return [], matching
    ranked = sorted(matching, key=lambda a: (load(a), last_chosen.get(a, -1), a))
    return sorted(ranked[: target.count]), matching
