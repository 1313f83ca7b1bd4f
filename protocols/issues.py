"""The Issue: one problem found in a cuelist, named by code, cue, key, file and line."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

IssueSeverity = Literal["error", "warning"]


class Issue(BaseModel):
    """One problem; `code` is a short slug (`unknown_key`, `cycle`...), `message` says what
    and where in words. `key` is relative to the cue when `cue` is set, else a dotted path
    from the top of the document (`cues[3].depends_on`, `defaults.retries`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    severity: IssueSeverity = "error"
    cue: str | None = None
    key: str | None = None
    line: int | None = None
    file: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def format(self) -> str:
        """`file:line: [warning: ]cue CUE key KEY: message (code)`, leaving out what is unknown."""
        where = ":".join(str(p) for p in (self.file, self.line) if p is not None)
        parts = [where] if where else []
        if self.severity == "warning":
            parts.append("warning")
        subject = " ".join(
            f"{label} {value}" for label, value in (("cue", self.cue), ("key", self.key)) if value
        )
        if subject:
            parts.append(subject)
        parts.append(f"{self.message} ({self.code})")
        return ": ".join(parts)

    def __str__(self) -> str:
        return self.format()


def error(
    code: str, message: str, *, cue: str | None = None, key: str | None = None,
    line: int | None = None,
) -> Issue:  # fmt: skip
    return Issue(code=code, message=message, severity="error", cue=cue, key=key, line=line)


def warning(
    code: str, message: str, *, cue: str | None = None, key: str | None = None,
    line: int | None = None,
) -> Issue:  # fmt: skip
    return Issue(code=code, message=message, severity="warning", cue=cue, key=key, line=line)


Locate = Callable[[tuple[str | int, ...]], tuple[str | None, str, int | None]]
"""Maps a pydantic location to (cue id, key, line)."""

_CODES = {
    "extra_forbidden": "unknown_key",
    "missing": "missing_key",
    "string_pattern_mismatch": "bad_name",
    "too_short": "empty",
    "enum": "bad_value",
    "literal_error": "bad_value",
}
_OWN = {
    "duplicate_item", "duplicate_id", "bad_schedule", "bad_name", "bad_filter", "empty_target",
    "target_conflict", "no_target",
}  # fmt: skip
PATTERN_NAMES: dict[str, str] = {}
"""What a regex pattern means in words; filled in by the modules that own the patterns."""


def dotted(loc: tuple[str | int, ...]) -> str:
    """`("cues", 3, "depends_on", 0)` -> `cues[3].depends_on[0]`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]":
            out += f".{part}" if out else part
    return out


def from_validation_error(
    exc: ValidationError, locate: Locate | None = None, known_keys: Iterable[str] = ()
) -> list[Issue]:
    """Every error of a pydantic ValidationError as an Issue, in document order."""
    issues = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        cue, key, line = locate(loc) if locate else (None, dotted(loc), None)
        kind = err["type"]
        code = _CODES.get(kind) or (
            kind if kind in _OWN else "wrong_type" if kind.endswith("_type") else "bad_value"
        )
        message = _message(err, loc, known_keys)
        issues.append(Issue(code=code, message=message, cue=cue, key=key or None, line=line))
    return issues


def _message(err: ErrorDetails, loc: tuple[str | int, ...], known: Iterable[str]) -> str:
    kind, given = err["type"], err.get("input")
    name = next((p for p in reversed(loc) if isinstance(p, str) and p != "[key]"), "")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"unknown key '{name}'{hint}"
    if kind == "missing":
        return f"missing required key '{name}'"
    if kind == "string_pattern_mismatch":
        pattern = str((err.get("ctx") or {}).get("pattern", ""))
        what = PATTERN_NAMES.get(pattern, f"a string matching {pattern}")
        where = "key" if loc and loc[-1] == "[key]" else "value"
        return f"{where} {_short(given)} is not {what}"
    if kind == "too_short" and isinstance(given, list | str | dict):
        return "must not be empty"
    text = str(err["msg"]).replace("Input should", "should")
    if kind.endswith("_type"):
        return f"{text}, not {type(given).__name__} {_short(given)}"
    if kind in _OWN or isinstance(given, dict | list):
        return text
    return f"{text}, not {_short(given)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
