"""The run state's JSON: the bytes `model_dump_json(exclude_defaults=True)` writes, by orjson.

A step writes its run's header and each cue it changed, so this is paid several times a
cue. pydantic compares every field with its default, calling each default factory anew;
here the defaults are made once, at import, and orjson writes what differs
(`python bench/codec.py`: a finished cue 4.0-4.1 to 2.8-2.9 us, a run's header 5.9-6.1 to
3.4-3.7 us). Only models pydantic writes as their fields (protocols.codec.writes_fields),
whose defaults are plain values or factories that make the same value every time, go
this way; anything orjson does not write as pydantic would (an int past 64 bits, a set,
bytes, another model in a free-form field) sends the whole document through pydantic, so
its bytes or its error are pydantic's (tests/hub/test_dump.py).

Which fields differ from their defaults is asked by a function made for each model once, at
import (`_compile`): one comparison a field, in the fields' order, with no lookups of which
rule a field takes (`python bench/hubcpu.py`: a cue's 1.5 to 0.8 us).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from hub.engine.state import RunState
from protocols.codec import models_in, writes_fields

_REQUIRED = object()  # a field with no default: always written


Changed = Callable[[dict[str, Any]], dict[str, Any]]  # a model's __dict__ -> what differs


def _changed_of(model: type[BaseModel]) -> Changed | None:
    """What differs from the model's defaults in an instance's fields, when they can be
    compared with as pydantic does (each default made once), else None."""
    nones: set[str] = set()
    defaults: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.default_factory is not None:
            if info.default_factory_takes_validated_data:
                return None
            made = info.default_factory()  # type: ignore[call-arg]
            if made != info.default_factory():  # type: ignore[call-arg]
                return None  # a factory pydantic would have to call each time
            defaults[name] = made
        elif info.default is None:
            nones.add(name)
        else:
            defaults[name] = _REQUIRED if info.default is PydanticUndefined else info.default
    return _compile(list(model.model_fields), nones, defaults)


def _compile(names: list[str], nones: set[str], defaults: dict[str, Any]) -> Changed:
    """The function that keeps the fields pydantic's `exclude_defaults` keeps, in their
    order: a field whose default is None when it is not None, a required one always, any
    other when it is not equal to its default (a model by its type and fields, what its
    `__eq__` compares, without the Python around it). A __dict__ of other fields than these
    (an extra, or one missing) raises KeyError."""
    lines = [
        "def changed(values):",
        f"    if len(values) != {len(names)}:",
        "        raise KeyError('not the fields of the model')",
        "    out = {}",
    ]
    scope: dict[str, Any] = {}
    for i, name in enumerate(names):
        key = repr(name)
        if name in nones:
            lines += [f"    v = values[{key}]", f"    if v is not None: out[{key}] = v"]
        elif defaults[name] is _REQUIRED:
            lines.append(f"    out[{key}] = values[{key}]")
        elif _plain_model(default := defaults[name]):  # compared as pydantic's __eq__ does
            scope[f"d{i}"], scope[f"t{i}"] = default.__dict__, type(default)
            lines += [
                f"    v = values[{key}]",
                f"    if type(v) is not t{i} or v.__dict__ != d{i}: out[{key}] = v",
            ]
        else:
            scope[f"d{i}"] = default
            lines += [f"    v = values[{key}]", f"    if v != d{i}: out[{key}] = v"]
    lines.append("    return out")
    exec("\n".join(lines), scope)  # the model's own field names (identifiers), as repr()
    made: Changed = scope["changed"]
    return made


def _plain_model(value: Any) -> bool:
    """Is `value` a model whose equality is its type's and its fields' (no private
    attributes, no extras: pydantic's `__eq__` then compares just those)?"""
    if not isinstance(value, BaseModel) or value.__pydantic_private__:
        return False
    return (
        value.__pydantic_extra__ is None
        and value.__dict__.keys() == type(value).model_fields.keys()
    )


_CHANGED: dict[type[BaseModel], Changed] = {
    model: changed
    for model in models_in(RunState)
    if writes_fields(model)
    and model.model_config.get("extra") != "allow"
    and (changed := _changed_of(model)) is not None
}


def _nested(value: Any) -> Any:
    changed = _CHANGED.get(type(value))
    if changed is None:
        raise TypeError(type(value).__name__)
    return changed(value.__dict__)


def dump_changed(model: BaseModel, exclude: frozenset[str] = frozenset()) -> bytes:
    """`model.model_dump_json(exclude=exclude, exclude_defaults=True)`, as bytes."""
    changed = _CHANGED.get(type(model))
    if changed is not None:
        try:
            fields = changed(model.__dict__)
            for name in exclude:
                fields.pop(name, None)
            return orjson.dumps(fields, default=_nested, option=orjson.OPT_UTC_Z)
        except (TypeError, KeyError):  # what orjson does not write as pydantic does
            pass
    return model.model_dump_json(exclude=set(exclude) or None, exclude_defaults=True).encode()
