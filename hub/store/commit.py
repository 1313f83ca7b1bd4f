"""The fenced commit: one engine step written atomically, or not at all, by one Lua call.

The script first checks the leader lease still holds this hub's fencing token, then
applies every operation of the step (run state, outgoing XADDs, events, escalations,
context, the router's XACKs). A stale leader's write is refused whole, so nothing it
decided after losing the lease takes effect. Every key the script touches is passed in
KEYS (as Redis Cluster requires); each operation names its one key by its index there.

All or nothing: the script is a declared write script (`#!lua`), so Redis refuses it
before it starts when it is out of memory or read-only; once it runs, no error can stop
it half-way: each operation runs under pcall (checking every key up front instead, with
TYPE and XINFO STREAM, cut bench/cues.py (c) from 418 to 170 runs/s). An operation whose key
cannot take it (a stream whose ids were exhausted by an explicit maximum id, a key of
another type) is skipped and logged, and the rest of the step lands: one broken stream
must not stop the engine for everyone else.

On a Redis Cluster no one script may touch the keys of a step (many slots): the same
operations go through the journaled commit instead (hub/store/journal.py): journaled
under the fence in the `{p0}` slot, then applied slot by slot, once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from pydantic_core import to_json

from hub.engine.escalations import OPEN, Escalation
from hub.engine.outbox import Outbox
from hub.engine.resources import ResourceBook
from hub.engine.state import RunState
from hub.store.journal import JournaledCommit
from hub.store.layout import Op, escalation_field, handoff_fields, owner_fields, run_fields
from hub.store.ops import COMMIT_ID_TTL_MS, COMMIT_RETRY_S, OPS_LUA, flat
from protocols.codec import encode
from protocols.ids import new_id
from protocols.keys import STREAM_FIELD, Keys
from protocols.tracecontext import with_traceparent
from protocols.transport import Storage

EVENTS_MAXLEN = 5_000
_EVENTS_MAXLEN = str(EVENTS_MAXLEN)  # as the XADDS word
log = logging.getLogger(__name__)

_COMMIT = (
    """#!lua
-- KEYS: 1 the leader lease, 2 this commit's id, 3.. every key an operation touches.
-- ARGV: 1 the fencing value, 2 the commit id's TTL (ms), then the operations, flat:
--   a word count n, the command, the index in KEYS of its key, its n - 2 other words.
-- The shebang makes this a declared write script: Redis refuses it whole, before it runs,
-- when it is out of memory or a replica. After that no error stops it half-way: each
-- operation runs under pcall, and one its key cannot take is skipped and named in the
-- reply (a stream whose ids someone exhausted, a key of another type).
if redis.call('EXISTS', KEYS[2]) == 1 then
  -- applied before its reply was lost (under the lease then, whoever holds it now):
  -- never apply it twice, nor call it refused
  return -1
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('STALE leader lease lost: state write refused')
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
"""
    + OPS_LUA
)


# What orjson must hand back rather than write (it would not write it as pydantic does)
_ORJSON_DEFERS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _json(value: object) -> bytes:
    """A run event's or context entry's JSON, as the run's record is written: what JSON has
    no number for (NaN, infinities a specialist sent) as null, anything else as its str.

    pydantic's `to_json` writes it; orjson first, for what it writes with the same bytes
    (a step writes a few events a cue: 0.13 against 1.17 µs for a cue's event). What it
    refuses or would write otherwise (a datetime, a dataclass, bytes, a set, an int past 64
    bits, a key that is not a string, a model: tests/hub/test_event_json.py) goes to
    pydantic whole."""
    try:
        return orjson.dumps(value, option=_ORJSON_DEFERS)
    except TypeError:  # orjson.JSONEncodeError too
        return to_json(value, fallback=str, inf_nan_mode="null")


def _slot_held(keys: Keys, esc: Escalation, engine: EngineState) -> list[Op]:
    """Where a new leader finds an escalation that holds its dedup slot, past the newest
    it loads: a run's (every one, as in memory) in the run's hash, which expires with the
    run (never for a run no longer being run: its keys are not made again); one of no
    run in the set of open ones while it is open (left once resolved)."""
    if esc.run_id is None:
        verb = "SADD" if esc.status == OPEN else "SREM"
        return [[verb, keys.open_escalations, esc.id]]
    if esc.run_id in engine.runs:
        return [["HSET", keys.run(esc.run_id), escalation_field(esc.id), "1"]]
    return []


class EngineState(Protocol):
    """What a commit reads of the engine besides its outbox."""

    @property
    def runs(self) -> Mapping[str, RunState]: ...
    @property
    def book(self) -> ResourceBook: ...
    @property
    def paused(self) -> str | None: ...


def _log_retry(exc: BaseException, wait_s: float) -> None:
    log.warning("state write: %s; retrying in %.2fs", exc, wait_s)


class FencedCommit:
    """Writes engine steps under the leader's fencing token."""

    def __init__(
        self, db: Storage, keys: Keys, retention_s: float | None = None, partition: int = 0
    ) -> None:
        self.keys = keys
        self.partition = partition  # whose lease fences the writes, whose runs they are
        self.script = db.script(_COMMIT)
        # a Redis Cluster cannot run one script over many slots: the journaled commit
        self.journal = JournaledCommit(db, keys, partition) if db.is_cluster else None
        # a finished run's keys expire this long after its end (None: kept for ever)
        self.retention_ms = None if retention_s is None else str(int(retention_s * 1000))

    async def __call__(self, out: Outbox, engine: EngineState, lease_value: str) -> None:
        """Write one engine step atomically; StaleLeader when the lease was lost.

        A lost connection is retried for up to COMMIT_RETRY_S; each commit carries its own
        id, checked inside the script, so a retry of a write whose reply was lost is not
        applied twice (no GO sent twice)."""
        ops = self.ops(out, engine)
        if not ops:
            return
        if self.journal is not None:
            await self.journal(ops, lease_value)
            return
        keys = [self.keys.leader(self.partition), self.keys.commit(new_id(), self.partition)]
        args = [lease_value, COMMIT_ID_TTL_MS, *flat(ops, keys)]
        reply = await self.script(keys, args, retry_s=COMMIT_RETRY_S, on_retry=_log_retry)
        if isinstance(reply, list):  # keys that could not take their operation (skipped)
            names = ", ".join(k.decode() if isinstance(k, bytes) else str(k) for k in reply[1:])
            log.error("state write skipped the operations on %s (Redis refused them)", names)

    async def replay(self, lease_value: str) -> int:
        """A new term's first write: on a cluster, the journaled steps not yet applied
        everywhere are applied (see hub.store.journal); on one server there are none."""
        return 0 if self.journal is None else await self.journal.replay(lease_value)

    def _lifetime(self, run_id: str, done: bool, reopened: bool) -> list[Op]:
        """A run's keys expire `retention_ms` after it ends (each write of an ended run
        restarts the clock); an ended run that runs again is kept again."""
        keys = self.keys
        run_keys = (keys.run(run_id), keys.run_events(run_id), keys.run_context(run_id))
        if done and self.retention_ms is not None:
            return [["PEXPIRE", key, self.retention_ms] for key in run_keys]
        if reopened:
            return [["PERSIST", key] for key in run_keys]
        return []

    def ops(self, out: Outbox, engine: EngineState) -> list[Op]:
        keys = self.keys
        ops: list[Op] = []
        lifetimes: list[Op] = []  # last: after every write that may create a run's key
        cues_of: dict[str, list[str]] = {}
        for run_id, cue_id in out.dirty_cues:
            cues_of.setdefault(run_id, []).append(cue_id)
        for run_id in sorted(out.dirty):
            run = engine.runs.get(run_id)
            if run is None:
                continue
            cues = cues_of.get(run_id, ())
            ops.extend(run_fields(keys.run(run_id), run, cues, run_id in out.fresh))
            if run.status.done:
                ops.append(["SREM", keys.active_runs(self.partition), run_id])
            else:
                ops.append(["SADD", keys.active_runs(self.partition), run_id])
            lifetimes.extend(self._lifetime(run_id, run.status.done, run_id in out.reopened))
            ops.append(["ZADD", keys.all_runs, "NX", str(run.created_at), run_id])
        # A stream's entries of the step go as one XADDS (hub.store.ops), in their order: a
        # message's copies to its targets' inboxes encoded once, each run's events together
        appends: dict[str, list[Any]] = {}

        def append(stream: str, maxlen: str, field: str, value: bytes) -> None:
            op = appends.get(stream)
            if op is None:
                op = appends[stream] = ["XADDS", stream, maxlen, field]
                ops.append(op)
            op.append(value)

        encoded: dict[int, bytes] = {}
        traced = out.traceparents
        for stream, message in out.messages:
            data = encoded.get(id(message))
            if data is None:
                data = encode(message)
                if traced and (traceparent := traced.get(id(message))) is not None:
                    data = with_traceparent(data, traceparent)
                encoded[id(message)] = data
            append(stream, "", STREAM_FIELD, data)
        streams: dict[str, str] = {}  # run id -> its events stream, named once a write
        for run_id, event in out.events:
            stream = streams.get(run_id) or streams.setdefault(run_id, keys.run_events(run_id))
            append(stream, _EVENTS_MAXLEN, "e", _json(event))
        for esc in out.escalations.values():
            ops.append(["SET", keys.escalation(esc.id), esc.model_dump_json()])
            ops.append(["ZADD", keys.escalations, str(esc.created_at), esc.id])
            ops.extend(_slot_held(keys, esc, engine))
        for run_id, key, entry in out.context:
            ops.append(["HSET", keys.run_context(run_id), key, _json(entry)])
        owned: dict[str, list[str]] = {}
        for run_id, key in out.owners:
            owned.setdefault(run_id, []).append(key)
        for run_id, context_keys in owned.items():
            if (run := engine.runs.get(run_id)) is not None:
                ops.extend(owner_fields(keys.run(run_id), run, context_keys))
        held: dict[str, list[str]] = {}
        for run_id, receiver in sorted(out.handoffs):
            held.setdefault(run_id, []).append(receiver)
        for run_id, receivers in held.items():
            if (run := engine.runs.get(run_id)) is not None:
                ops.extend(handoff_fields(keys.run(run_id), run, receivers))
        ops.extend(out.raw)
        if out.resources_changed:
            ops.append(
                ["SET", keys.resources(self.partition), engine.book.dump().model_dump_json()]
            )
        if out.paused_changed:
            if engine.paused is None:
                ops.append(["DEL", keys.paused])
            else:
                ops.append(["SET", keys.paused, engine.paused])
        ops.extend(lifetimes)
        return ops
