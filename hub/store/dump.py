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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from hub.engine.state import RunState
from protocols.codec import models_in, writes_fields

_REQUIRED = object()  # a field with no default: always written


@dataclass(frozen=True, slots=True)
class _Plan:
    """A model's fields: those whose default is None, and the others' defaults."""

    nones: frozenset[str]
    defaults: dict[str, Any]  # _REQUIRED for a field with none


def _plan(model: type[BaseModel]) -> _Plan | None:
    """The model's defaults, when they can be compared with as pydantic does: made once."""
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
    return _Plan(frozenset(nones), defaults)


_PLANS: dict[type[BaseModel], _Plan] = {
    model: plan
    for model in models_in(RunState)
    if writes_fields(model)
    and model.model_config.get("extra") != "allow"
    and (plan := _plan(model)) is not None
}


def _changed(model: BaseModel, plan: _Plan) -> dict[str, Any]:
    """The fields pydantic's `exclude_defaults` keeps (KeyError: not a field of the plan's)."""
    nones, defaults = plan.nones, plan.defaults
    return {
        name: value
        for name, value in model.__dict__.items()
        if (value is not None if name in nones else value != defaults[name])
    }


def _nested(value: Any) -> Any:
    plan = _PLANS.get(type(value))
    if plan is None:
        raise TypeError(type(value).__name__)
    return _changed(value, plan)


def dump_changed(model: BaseModel, exclude: frozenset[str] = frozenset()) -> bytes:
    """`model.model_dump_json(exclude=exclude, exclude_defaults=True)`, as bytes."""
    plan = _PLANS.get(type(model))
    if plan is not None:
        try:
            fields = _changed(model, plan)
            for name in exclude:
                fields.pop(name, None)
            return orjson.dumps(fields, default=_nested, option=orjson.OPT_UTC_Z)
        except (TypeError, KeyError):  # what orjson does not write as pydantic does
            pass
    return model.model_dump_json(exclude=set(exclude) or None, exclude_defaults=True).encode()
