"""How a run is laid out in its hash: a header, the cue order, one field per cue.

A step writes only the header and the cues it touched, so a 10,000-cue run costs what it
changed; the order (which never changes) is written when the run is new or adopted. The
hash also names every escalation raised in the run (a field each, written with it), so a
new leader finds each one's dedup slot however many newer escalations there are. What can
be as big as a request or a message has a field of its own, not written again with every
step of the run: the run's params (which never change: written with the order) and each
handoff context held for its receiver's GO (written when it comes, deleted when given).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic_core import to_json

from hub.engine.state import CueRun, RunState
from hub.store.dump import dump_changed

HEADER, ORDER, CUE = "h", "o", "c:"  # a run's hash: header, cue order, one field per cue
PARAMS = "p"  # ...the run's params, when it has any (written with the order)
OWNER = "w:"  # ...and one field per context key: the agent that wrote it (written once)
ESCALATION = "x:"  # ...and one field per escalation raised in the run (its id; value unused)
HANDOFF = "f:"  # ...and one field per receiver a handoff context waits for (the context)
HSET_CHUNK = 2_000  # field-value items per HSET: Lua's unpack() takes ~8,000 at most

Op = list[Any]  # one Redis command as its words, its one key second: [name, key, ...]
NOT_HEADER = frozenset({"cues", "context_owners", "handoffs", "params"})  # fields of their own


def run_fields(key: str, run: RunState, cue_ids: Iterable[str], fresh: bool = False) -> list[Op]:
    """HSET operations for a run: its header, and the named cues, one field each; `fresh`
    (a new or adopted run) adds what never changes (the cue order, the params) and the
    handoff contexts held."""
    fields: list[Any] = [HEADER, dump_changed(run, NOT_HEADER)]
    if fresh:
        fields += [ORDER, json.dumps(list(run.cues))]
        if run.params:
            fields += [PARAMS, to_json(run.params)]
        for receiver, context in run.handoffs.items():
            fields += [HANDOFF + receiver, to_json(context)]
    for cue_id in cue_ids:
        fields += [CUE + cue_id, dump_changed(run.cues[cue_id])]
    return _chunked("HSET", key, fields)


def owner_fields(key: str, run: RunState, context_keys: Iterable[str]) -> list[Op]:
    """HSET of the owners of these context keys (each written once, when first written)."""
    fields: list[Any] = []
    for context_key in context_keys:
        fields += [OWNER + context_key, run.context_owners[context_key]]
    return _chunked("HSET", key, fields)


def handoff_fields(key: str, run: RunState, receivers: Iterable[str]) -> list[Op]:
    """The fields of these receivers' handoff contexts: set while one is held, else gone."""
    held: list[Any] = []
    given: list[str] = []
    for receiver in receivers:
        context = run.handoffs.get(receiver)
        if context is None:
            given.append(HANDOFF + receiver)
        else:
            held += [HANDOFF + receiver, to_json(context)]
    return _chunked("HSET", key, held) + _chunked("HDEL", key, given)


def _chunked(command: str, key: str, words: list[Any]) -> list[Op]:
    """`command key word...` over as many operations as Lua's unpack() takes the words in
    (an even number each: HSET's field-value pairs stay together)."""
    return [[command, key, *words[i : i + HSET_CHUNK]] for i in range(0, len(words), HSET_CHUNK)]


def escalation_field(esc_id: str) -> str:
    """The run hash's field naming an escalation raised in the run."""
    return ESCALATION + esc_id


def escalation_ids(fields: dict[bytes, bytes]) -> list[str]:
    """The escalations a run's hash names (see `escalation_field`)."""
    head = ESCALATION.encode()
    return [name[len(head) :].decode() for name in fields if name.startswith(head)]


def read_run(fields: dict[bytes, bytes]) -> RunState | None:
    """A run back from its hash (None when there is none)."""
    header = fields.get(HEADER.encode())
    if header is None:
        return None
    run = RunState.model_validate_json(header)
    params = fields.get(PARAMS.encode())
    if params is not None:  # (an older hub kept them in the header)
        run.params = json.loads(params)
    for cue_id in json.loads(fields.get(ORDER.encode(), b"[]")):
        raw = fields.get((CUE + cue_id).encode())
        run.cues[cue_id] = CueRun.model_validate_json(raw) if raw else CueRun()
    owner, handoff = OWNER.encode(), HANDOFF.encode()
    for name, value in fields.items():
        if name.startswith(owner):
            run.context_owners[name[len(owner) :].decode()] = value.decode()
        elif name.startswith(handoff):  # (an older hub kept them in the header)
            run.handoffs[name[len(handoff) :].decode()] = json.loads(value)
    return run
