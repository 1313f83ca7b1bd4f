"""`dump_changed` (orjson) writes the bytes pydantic's `model_dump_json(exclude_defaults=True)`
writes for the run state, or fails as it does.

Runs and cues with any field left at its default or set (to its default's equal, too),
nested models changed or not, and free-form fields (results, contexts, params) holding what
orjson refuses or writes otherwise: ints past 64 bits, sets, bytes, models, odd floats.
"""

from __future__ import annotations

import enum
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hub.engine.state import CueRun, RunState
from hub.store.dump import dump_changed
from hub.store.layout import HANDOFF, HEADER, PARAMS, handoff_fields, read_run, run_fields
from tests.protocols.test_codec_orjson import odd_value


def value_of(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of a state field's type (as the engine may set them, unvalidated)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return value_of(args[0])
    if origin in (Union, types.UnionType):
        return st.one_of(*(value_of(arg) for arg in args))
    if origin is Literal:
        return st.sampled_from(args)
    if origin is dict:
        return st.dictionaries(st.text(max_size=4), value_of(args[1]), max_size=3)
    if origin is list:
        return st.lists(value_of(args[0]), max_size=3)
    if annotation is Any:
        return odd_value
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(list(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_of(annotation)
    simple = {bool: st.booleans(), int: st.integers(), float: st.floats(), str: st.text(max_size=6)}
    return simple[annotation]


def model_of(model: type[BaseModel], skip: frozenset[str] = frozenset()) -> st.SearchStrategy[Any]:
    """Instances with each field at its default, at an equal but distinct value, or drawn."""

    @st.composite
    def build(draw: st.DrawFn) -> BaseModel:
        values: dict[str, Any] = {}
        for name, field in model.model_fields.items():
            if name in skip:
                continue
            how = draw(st.sampled_from(["default", "equal", "drawn"]))
            if how == "drawn" or field.is_required():
                values[name] = draw(value_of(field.annotation))
            elif how == "equal":
                values[name] = field.get_default(call_default_factory=True)
        return model.model_construct(**values)

    return build()


Written = bytes | type[Exception]


def ours(model: BaseModel, exclude: frozenset[str] = frozenset()) -> Written:
    try:
        return dump_changed(model, exclude)
    except Exception as exc:
        return type(exc)


def pydantic_wrote(model: BaseModel, exclude: frozenset[str] = frozenset()) -> Written:
    try:
        return model.model_dump_json(exclude=set(exclude) or None, exclude_defaults=True).encode()
    except Exception as exc:
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(cue=model_of(CueRun))
def test_a_cue_is_written_as_pydantic_writes_it(cue: CueRun) -> None:
    assert ours(cue) == pydantic_wrote(cue)


@settings(max_examples=300, deadline=None)
@given(run=model_of(RunState, skip=frozenset({"cues"})))
def test_a_run_header_is_written_as_pydantic_writes_it(run: RunState) -> None:
    header = frozenset({"cues", "context_owners"})
    assert ours(run, header) == pydantic_wrote(run, header)
    assert ours(run) == pydantic_wrote(run)


def test_values_orjson_refuses_take_pydantics_path() -> None:
    """Checks the properties above meet both paths: pydantic's answer where orjson has none."""
    cue = CueRun(attempt=2)
    cue.result = {"big": 2**70, "set": frozenset({1})}
    assert ours(cue) == b'{"attempt":2,"result":{"big":1180591620717411303424,"set":[1]}}'
    cue.result = {}
    assert dump_changed(cue) == b'{"attempt":2}'  # the default, equal but not the same dict


def test_the_state_written_reads_back_equal() -> None:
    run = RunState(run_id="r1", cuelist="c", version="v1", created_at=1.5, params={"n": 1})
    run.cues = {"A": CueRun(attempt=1, result={"echo": {"ok": True}}), "B": CueRun()}
    run.record.note("errors", "boom")
    run.usage = run.usage.plus(type(run.usage)(tokens=7, cost=0.5))
    [op] = run_fields("k", run, list(run.cues), fresh=True)
    fields = {
        (k if isinstance(k, bytes) else k.encode()): (v if isinstance(v, bytes) else v.encode())
        for k, v in zip(op[2::2], op[3::2], strict=True)
    }
    assert b"cues" not in fields[HEADER.encode()]
    assert read_run(fields) == run


@settings(max_examples=100, deadline=None)
@given(cue=model_of(CueRun), run=model_of(RunState, skip=frozenset({"cues"})))
def test_a_field_set_plainly_is_set_as_pydantic_sets_it(cue: CueRun, run: RunState) -> None:
    """`Plain` models (the engine's state) skip pydantic's dispatch per field: each field
    set on them holds, dumps and compares as one set through pydantic's own __setattr__."""
    for drawn in (cue, run):
        plain, twin = type(drawn).model_construct(), type(drawn).model_construct()
        for name in type(drawn).model_fields:
            value = getattr(drawn, name)
            setattr(plain, name, value)
            BaseModel.__setattr__(twin, name, value)
        assert plain.__dict__ == twin.__dict__
        assert plain == twin and ours(plain) == ours(twin)


def test_a_held_handoff_context_is_a_field_of_its_own_written_when_held_and_gone_when_given() -> (
    None
):
    """Up to a message's size, it is not written again with every step of its run."""
    run = RunState(run_id="r1", cuelist="c", version="v1", created_at=1.5)
    run.handoffs = {"bob": {"code": "src/x.py"}}
    [step] = run_fields("k", run, [])
    assert step == ["HSET", "k", HEADER, step[3]] and b"src/x.py" not in step[3]
    [fresh] = run_fields("k", run, [], fresh=True)  # a new or adopted run: all of it
    assert dict(zip(fresh[2::2], fresh[3::2], strict=True))[HANDOFF + "bob"] == (
        b'{"code":"src/x.py"}'
    )
    assert handoff_fields("k", run, ["bob"]) == [["HSET", "k", "f:bob", b'{"code":"src/x.py"}']]
    run.handoffs.clear()
    assert handoff_fields("k", run, ["bob"]) == [["HDEL", "k", "f:bob"]]


def test_a_handoff_an_older_hub_kept_in_the_header_still_reads_back() -> None:
    run = RunState(run_id="r1", cuelist="c", version="v1", created_at=1.5)
    run.handoffs = {"bob": {"code": "src/x.py"}, "cat": {"n": 1}}
    older = dump_changed(run, frozenset({"cues", "context_owners"}))
    assert b"src/x.py" in older
    fields = {HEADER.encode(): older, (HANDOFF + "cat").encode(): b'{"n": 2}'}
    assert read_run(fields).handoffs == {"bob": {"code": "src/x.py"}, "cat": {"n": 2}}


def test_a_runs_params_are_written_once_with_its_order_not_with_each_step() -> None:
    run = RunState(run_id="r1", cuelist="c", version="v1", created_at=1.5)
    run.params = {"doc": "y" * 1000, "n": 2**70}
    [step] = run_fields("k", run, [])
    assert step == ["HSET", "k", HEADER, step[3]] and b"yyy" not in step[3]
    [fresh] = run_fields("k", run, [], fresh=True)
    fields = {_b(k): _b(v) for k, v in zip(fresh[2::2], fresh[3::2], strict=True)}
    assert PARAMS.encode() in fields and read_run(fields) == run
    run.params = {}
    [fresh] = run_fields("k", run, [], fresh=True)  # none: no field
    assert PARAMS not in fresh[2::2]
    older = RunState(run_id="r1", cuelist="c", version="v1", created_at=1.5, params={"n": 1})
    header = dump_changed(older, frozenset({"cues", "context_owners", "handoffs"}))
    assert read_run({HEADER.encode(): header}).params == {"n": 1}  # an older hub's header


def _b(word: str | bytes) -> bytes:
    return word if isinstance(word, bytes) else word.encode()
