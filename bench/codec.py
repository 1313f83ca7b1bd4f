"""Codec micro-benchmark: encode and decode+validate one envelope, the pydantic codec
beside the candidates of issue 18 item 2, for the hot-path message types.

Decode (bytes -> a validated envelope):
  pydantic     protocols.codec.decode: pydantic `validate_json` over the discriminated union
  per-type     the message_type read first (orjson), then its envelope's `model_validate_json`
  orjson+py    `orjson.loads`, then the same union's `validate_python` (python mode)
  msgspec      msgspec Structs generated from the pydantic models, tagged on message_type:
               decoded and checked, but Structs, not the envelopes the hub and SDK use
  msgspec+pyd  the same, then each Struct made the pydantic model (`model_construct`, no
               second validation, but Python: an envelope is 2-4 models): what the hub,
               the SDK and `Envelope.body` would need
Encode (an envelope -> bytes):
  pydantic     `model_dump_json` (protocols.codec.encode before orjson)
  orjson       protocols.codec.encode: `orjson.dumps` over each model's fields, same bytes
  msgspec      `msgspec.json.Encoder` over the Struct decoded above (the Struct in hand)

The Structs are made from the models here, for the measure only. They are not the same
rules: no `BeforeValidator` (a malformed traceparent is kept, where pydantic drops it),
msgspec's strict types (pydantic's JSON mode takes "5" for an int), and a HandoffContext
becomes a plain dict (a Struct cannot keep unknown keys as pydantic's `extra="allow"`),
checked by pydantic in msgspec+pyd.
Run state (hub/store/dump.py, what every engine step writes: its run's header, each cue
it changed): pydantic's `model_dump_json(exclude_defaults=True)` against `dump_changed`
(orjson, the same bytes), for a finished direct cue and a run's header.
Spans (tracing on, exported over OTLP): what the SDK's OTLP exporter does with a span
record (a `ReadableSpan` made, then `encode_spans` and serialized, in batches of 512)
against protocols.otlp writing the same request's bytes, for the hub's cue span (two
phase events, a link) and a specialist's `invoke_agent` span; each run's bytes parsed
equal before timing.
Each figure is the best of `--repeat` timings of `--number` calls, in µs per message;
ratios are pydantic's time over the candidate's (above 1: the candidate is faster).

    python bench/codec.py [--number 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import timeit
import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types as at
import msgspec
import orjson
import pydantic_core
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, StringConstraints
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hub.engine.state import CueRun, RunState
from hub.store.dump import dump_changed
from hub.store.layout import NOT_HEADER
from protocols import otlp
from protocols import payloads as p
from protocols.codec import _ANY_ENVELOPE, ENVELOPES, Envelope, decode, encode, make
from protocols.messages import MessageType
from protocols.settings import Settings
from protocols.telemetry import Dropped, Spans

RUN = "0192f3a4-5b6c-7d8e-9f01-23456789abcd"


def hot_messages() -> list[Envelope]:
    """One envelope of each hot type, shaped as bench/cues.py (d) and bench/routing.py send."""
    cue = {"run_id": RUN, "cue_id": "cue-0042"}
    return [
        make(
            MessageType.TASK_ASSIGN,
            p.TaskAssign(cue_id="cue-0042", action={"op": "echo", "n": 42}, description="echo"),
            from_agent="hub", target_agents=("echo",), **cue,
        ),
        make(
            MessageType.COORD_GO,
            p.CoordGo(cue_id="cue-0042", target_agents=["echo"], action={"op": "echo"}),
            from_agent="hub", target_agents=("echo",), **cue,
        ),
        make(
            MessageType.STATUS_STARTED, p.StatusStarted(replica="echo-1"), from_agent="echo", **cue
        ),
        make(
            MessageType.STATUS_COMPLETED,
            p.StatusCompleted(
                result={"echo": {"op": "echo", "n": 42}},
                replica="echo-1",
                usage=p.Usage(tokens=120, cost=0.0012, counters={"calls": 1}),
            ),
            from_agent="echo", **cue,
        ),
        make(
            MessageType.TASK_HANDOFF,
            p.TaskHandoff(
                from_agent="bench-a", to_agent="bench-b", task_id="t-0042",
                handoff_context=p.HandoffContext(
                    work_completed=["parsed"],
                    artifacts_produced=[p.Artifact(path="out/a.json", hash="sha256:ab12")],
                    implemented_code="src/a.py",
                ),
            ),
            from_agent="bench-a", run_id=RUN,
        ),
    ]  # fmt: skip


# -- the msgspec mirror, generated from the pydantic models -----------------------------


def _meta(metadata: list[Any]) -> msgspec.Meta | None:
    """msgspec's constraints for pydantic's (annotated_types and StringConstraints)."""
    kw: dict[str, Any] = {}
    for m in metadata:
        if isinstance(m, at.Ge | at.Gt | at.Le | at.Lt):
            bound = type(m).__name__.lower()
            kw[bound] = getattr(m, bound)
        elif isinstance(m, at.MinLen):
            kw["min_length"] = m.min_length
        elif isinstance(m, at.MaxLen):
            kw["max_length"] = m.max_length
        elif isinstance(m, StringConstraints):
            kw.update(min_length=m.min_length, max_length=m.max_length, pattern=m.pattern)
        elif getattr(m, "pattern", None):
            kw["pattern"] = m.pattern
    kw = {k: v for k, v in kw.items() if v is not None}
    return msgspec.Meta(**kw) if kw else None


def _mirror(tp: Any, structs: dict[type, Any]) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp is p.HandoffContext:  # extra="allow": a Struct drops unknown keys, so a dict
            return dict[str, Any]
        return _struct(tp, structs)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        inner, meta = _mirror(args[0], structs), _meta(list(args[1:]))
        return Annotated[inner, meta] if meta else inner
    if origin is Union or origin is types.UnionType:
        return Union[tuple(_mirror(a, structs) for a in args)]  # noqa: UP007
    if origin in (list, tuple, dict) and args:
        return origin[tuple(a if a is Ellipsis else _mirror(a, structs) for a in args)]
    return tp


def _field(info: FieldInfo, structs: dict[type, Any]) -> tuple[Any, Any]:
    tp = _mirror(info.annotation, structs)
    meta = _meta(info.metadata)
    if meta is not None:  # on the value, not on the None of an optional field
        args = get_args(tp) if get_origin(tp) is Union else (tp,)
        tp = Union[tuple(a if a is type(None) else Annotated[a, meta] for a in args)]  # noqa: UP007
    if info.default_factory is not None:
        return tp, msgspec.field(default_factory=info.default_factory)  # type: ignore[arg-type]
    return tp, (msgspec.NODEFAULT if info.default is PydanticUndefined else info.default)


def _struct(model: type[BaseModel], structs: dict[type, Any], **tagged: Any) -> Any:
    if model in structs and not tagged:
        return structs[model]
    fields = []
    for name, info in model.model_fields.items():
        if tagged and name == "message_type":
            continue  # the tag
        tp, default = _field(info, structs)
        fields.append((name, tp) if default is msgspec.NODEFAULT else (name, tp, default))
    fields.sort(key=lambda f: len(f) == 3)  # required fields first, as msgspec asks
    made = msgspec.defstruct(
        model.__name__, fields, frozen=True, forbid_unknown_fields=True, **tagged
    )
    if not tagged:
        structs[model] = made
    return made


def mirror_envelopes() -> dict[MessageType, Any]:
    structs: dict[type, Any] = {}
    out = {}
    for mt, model in ENVELOPES.items():
        out[mt] = _struct(model, structs, tag_field="message_type", tag=mt.value)
    return out


def to_pydantic(struct: Any, model: type[BaseModel]) -> Any:
    """A Struct made the pydantic model without validating again (`model_construct`)."""
    values: dict[str, Any] = {}
    for name in struct.__struct_fields__:
        value = getattr(struct, name)
        sub = model.model_fields[name].annotation
        if isinstance(value, msgspec.Struct):
            sub = next(a for a in (sub, *get_args(sub)) if isinstance(a, type))
            value = to_pydantic(value, sub)
        elif name == "handoff_context":
            value = p.HandoffContext.model_validate(value)  # the dict still to be checked
        values[name] = value
    tag = struct.__struct_config__.tag
    if tag is not None:
        values["message_type"] = MessageType(tag)
    return model.model_construct(**values)


# -- the candidates ----------------------------------------------------------------------


def per_type(raw: bytes) -> Envelope:
    mt = MessageType(orjson.loads(raw)["message_type"])
    return ENVELOPES[mt].model_validate_json(raw)


def orjson_py(raw: bytes) -> Envelope:
    return _ANY_ENVELOPE.validate_python(orjson.loads(raw))


def pydantic_encode(message: Envelope) -> bytes:
    return message.model_dump_json().encode()


def best_us(call: Callable[[], Any], number: int, repeat: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def measure(message: Envelope, decoder: Any, number: int, repeat: int) -> dict[str, float]:
    """µs per call of every candidate, on `message`; each first reads the same message."""
    raw, model = encode(message), ENVELOPES[message.message_type]
    for call in (decode, per_type, orjson_py, decoder.decode):
        call(raw)  # warm: the first call of each builds caches
    struct = decoder.decode(raw)
    assert decode(raw) == per_type(raw) == orjson_py(raw) == message
    assert to_pydantic(struct, model) == message
    assert pydantic_encode(message) == raw and decode(ENCODER.encode(struct)) == message
    calls: dict[str, Callable[[], Any]] = {
        "dec pydantic": lambda: decode(raw),
        "per-type": lambda: per_type(raw),
        "orjson+py": lambda: orjson_py(raw),
        "msgspec": lambda: decoder.decode(raw),
        "msgspec+pyd": lambda: to_pydantic(decoder.decode(raw), model),
        "enc pydantic": lambda: pydantic_encode(message),
        "orjson": lambda: encode(message),
        "msgspec enc": lambda: ENCODER.encode(struct),
    }
    return {name: best_us(call, number, repeat) for name, call in calls.items()}


def state_rows(number: int, repeat: int) -> list[tuple[str, int, float, float]]:
    """(what, bytes, pydantic µs, dump_changed µs) for a finished cue and a run's header."""
    at = 1_795_800_000.25
    cue = CueRun.model_validate({
        "state": "completed", "attempt": 1, "fired_by": "run-start", "fired_seq": 42,
        "go_by": "run-start", "warned_at": at, "standby_at": at, "go_at": at,
        "completed_at": at + 0.01, "targets": {"worker": "completed"},
        "gos": [{"attempt": 1, "at": at, "fired_by": "run-start"}],
        "result": {"worker": {"echo": True}},
    })  # fmt: skip
    run = RunState(run_id=RUN, cuelist="direct", version="v1", created_at=at, started_at=at)
    run.cues = {"cue-0042": cue}
    rows = []
    for name, model, exclude in (
        ("cue (finished)", cue, frozenset()),
        ("run header", run, NOT_HEADER),
    ):

        def theirs(m: BaseModel = model, x: frozenset[str] = exclude) -> bytes:
            return m.model_dump_json(exclude=set(x) or None, exclude_defaults=True).encode()

        def ours(m: BaseModel = model, x: frozenset[str] = exclude) -> bytes:
            return dump_changed(m, x)

        assert ours() == theirs()
        rows.append(
            (name, len(ours()), best_us(theirs, number, repeat), best_us(ours, number, repeat))
        )
    return rows


def span_rows(number: int, repeat: int) -> list[tuple[str, int, float, float]]:
    """(what, bytes, SDK µs, protocols.otlp µs) per span, in batches of BATCH spans."""
    spans = Spans(Settings(), "callboard-hub", Dropped())  # its resource, scope, SDK spans
    request = otlp.Request(spans.resource, spans.scope)
    trace_id, now = 0x0AF7651916CD43DD8448EB211C80319C, 1_795_800_000_000_000_000
    link = (trace_id, 0x77, True, True, {"messaging.system": "redis"})
    made: dict[str, Callable[[int], Any]] = {
        "cue span": lambda i: (
            f"cue C{i:05d}", trace_id, 0x1000 + i, 0x99, SpanKind.INTERNAL, now, now + 9_000,
            {"callboard.run.id": RUN, "callboard.cue.id": f"C{i:05d}",
             "callboard.cue.attempt": 1},
            [("go", {"callboard.go.fired_by": "run-start"}, now), ("completed", None, now)],
            [link], None,
        ),
        "invoke span": lambda i: (
            "invoke_agent worker", trace_id, 0x2000 + i, 0x1000 + i, SpanKind.INTERNAL, now,
            now + 5_000,
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "worker",
             "callboard.cue.id": f"C{i:05d}", "callboard.cue.attempt": 1,
             "callboard.run.id": RUN},
            (), (), None,
        ),
    }  # fmt: skip
    rows = []
    for name, record in made.items():
        records = [record(i) for i in range(BATCH)]

        def theirs(rs: list[Any] = records) -> bytes:
            return encode_spans([spans._span(r) for r in rs]).SerializeToString()

        def ours(rs: list[Any] = records) -> bytes:
            return request([otlp.span(*r) for r in rs])

        parsed = ExportTraceServiceRequest.FromString
        assert parsed(ours()) == parsed(theirs())
        batches = max(1, number // BATCH)
        sdk = best_us(theirs, batches, repeat) / BATCH
        direct = best_us(ours, batches, repeat) / BATCH
        rows.append((name, len(ours()) // BATCH, sdk, direct))
    spans.shutdown()
    return rows


BATCH = 512  # spans per export request (OTEL_BSP_MAX_EXPORT_BATCH_SIZE's default)
ENCODER = msgspec.json.Encoder()
DECODE_COLUMNS = 5  # the first five of `measure`; the rest are encoders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings; the best is shown")
    args = parser.parse_args()
    decoder = msgspec.json.Decoder(Union[tuple(mirror_envelopes().values())])  # noqa: UP007
    rows = [
        (m.message_type.value, len(encode(m)), measure(m, decoder, args.number, args.repeat))
        for m in hot_messages()
    ]
    print(
        "µs per message, best of the timings; x: pydantic's time over the candidate's. "
        f"pydantic-core {pydantic_core.__version__}, orjson {orjson.__version__}, "
        f"msgspec {msgspec.__version__}, python {sys.version.split()[0]}"
    )
    cols = list(rows[0][2])
    print(f"{'message':<18}{'bytes':>6}" + "".join(f"{c:>13}" for c in cols))
    for name, size, us in rows:
        cells = []
        for i, c in enumerate(cols):
            base = us["dec pydantic"] if i < DECODE_COLUMNS else us["enc pydantic"]
            ratio = f" {base / us[c]:4.1f}x" if base != us[c] else " " * 6
            cells.append(f"{us[c]:6.2f}{ratio}")
        print(f"{name:<18}{size:>6}" + "".join(f"{cell:>13}" for cell in cells))
    print("\nrun state, µs per document: pydantic exclude_defaults | dump_changed (orjson)")
    for name, size, theirs, ours in state_rows(args.number, args.repeat):
        print(f"{name:<18}{size:>6}{theirs:13.2f}{ours:13.2f} {theirs / ours:4.1f}x")
    print("\nspans, µs per span: SDK ReadableSpan + OTLP encoder | protocols.otlp")
    for name, size, theirs, ours in span_rows(args.number, args.repeat):
        print(f"{name:<18}{size:>6}{theirs:13.2f}{ours:13.2f} {theirs / ours:4.1f}x")


if __name__ == "__main__":
    main()
