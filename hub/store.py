"""Hub state in Redis: key layout, the fenced commit, and reads for the API.

Every state write of the engine goes through one Lua script that first checks the leader
lease still holds this hub's fencing token, then applies all operations of the step (run
documents, outgoing XADDs, events, escalations, context) atomically. A stale leader's
write is refused whole, so nothing it decided after losing the lease takes effect.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic_core import to_json

from hub.engine.escalations import Escalation
from hub.engine.outbox import Outbox
from hub.engine.state import CueRun, RunState
from protocols.codec import encode
from protocols.errors import StaleLeader
from protocols.ids import new_id
from protocols.keys import STREAM_FIELD, Keys
from protocols.transport import Redis, retry_transient

EVENTS_MAXLEN = 5_000
HEADER, ORDER, CUE = "h", "o", "c:"  # a run's hash: header, cue order, one field per cue
HSET_CHUNK = 2_000  # field-value items per HSET: Lua's unpack() takes ~8,000 at most
COMMIT_RETRY_S = 10.0
COMMIT_ID_TTL_MS = 120_000
log = logging.getLogger(__name__)

_COMMIT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('STALE leader lease lost')
end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then
  return -1  -- this commit was applied before its reply was lost: never apply it twice
end
-- then the operations, flat: a word count, then the words of one command, and so on
local i, last, done = 3, #ARGV, 0
while i <= last do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i, done = i + n + 1, done + 1
end
return done
"""


def _log_retry(exc: BaseException, wait_s: float) -> None:
    log.warning("state write: %s; retrying in %.2fs", exc, wait_s)


def _flat(ops: list[list[Any]]) -> list[Any]:
    """The script's operation words: each command preceded by its length (no JSON to build
    here and to decode in Lua: values go as they are, packed by hiredis)."""
    words: list[Any] = []
    for op in ops:
        words.append(len(op))
        words.extend(op)
    return words


def run_fields(key: str, run: RunState, cue_ids: Any, fresh: bool = False) -> list[list[Any]]:
    """HSET operations for a run: its header, and the named cues, one field each; `fresh`
    (a new or adopted run) adds the cue order, which never changes. A step writes only the
    cues it touched, so a 10,000-cue run costs what it changed."""
    fields: list[Any] = [HEADER, run.model_dump_json(exclude={"cues"}, exclude_defaults=True)]
    if fresh:
        fields += [ORDER, json.dumps(list(run.cues))]
    for cue_id in cue_ids:
        fields += [CUE + cue_id, run.cues[cue_id].model_dump_json(exclude_defaults=True)]
    return [["HSET", key, *fields[i : i + HSET_CHUNK]] for i in range(0, len(fields), HSET_CHUNK)]


def read_run(fields: dict[bytes, bytes]) -> RunState | None:
    """A run back from its hash (None when there is none)."""
    header = fields.get(HEADER.encode())
    if header is None:
        return None
    run = RunState.model_validate_json(header)
    for cue_id in json.loads(fields.get(ORDER.encode(), b"[]")):
        raw = fields.get((CUE + cue_id).encode())
        run.cues[cue_id] = CueRun.model_validate_json(raw) if raw else CueRun()
    return run


class StateStore:
    """Reads and the fenced commit of engine state."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._commit = client.register_script(_COMMIT)

    async def commit(self, out: Outbox, engine: Any, lease_value: str) -> None:
        """Write one engine step atomically under the leader's fencing token.

        A lost connection is retried for up to COMMIT_RETRY_S; each commit carries its own
        id, checked inside the script, so a retry of a write whose reply was lost is not
        applied twice (no GO sent twice)."""
        ops = self.ops(out, engine)
        if not ops:
            return
        keys = [self.keys.leader(), self.keys.commit(new_id())]
        args = [lease_value, COMMIT_ID_TTL_MS, *_flat(ops)]
        try:  # back off while Redis comes back
            await retry_transient(
                lambda: self._commit(keys=keys, args=args), COMMIT_RETRY_S, _log_retry
            )
        except Exception as exc:
            if "STALE" in str(exc):
                raise StaleLeader("leader lease lost: state write refused") from None
            raise

    def ops(self, out: Outbox, engine: Any) -> list[list[Any]]:
        keys = self.keys
        ops: list[list[Any]] = []
        cues_of: dict[str, list[str]] = {}
        for run_id, cue_id in out.dirty_cues:
            cues_of.setdefault(run_id, []).append(cue_id)
        for run_id in sorted(out.dirty):
            run: RunState | None = engine.runs.get(run_id)
            if run is None:
                continue
            cues = cues_of.get(run_id, ())
            ops.extend(run_fields(keys.run(run_id), run, cues, run_id in out.fresh))
            if run.status.done:
                ops.append(["SREM", keys.active_runs(), run_id])
            else:
                ops.append(["SADD", keys.active_runs(), run_id])
            ops.append(["ZADD", keys.all_runs, "NX", str(run.created_at), run_id])
        encoded: dict[int, bytes] = {}  # a message to several inboxes is encoded once
        for stream, message in out.messages:
            data = encoded.get(id(message))
            if data is None:
                data = encoded[id(message)] = encode(message)
            ops.append(["XADD", stream, "*", STREAM_FIELD, data])
        for run_id, event in out.events:
            ops.append([
                "XADD", keys.run_events(run_id), "MAXLEN", "~", str(EVENTS_MAXLEN), "*",
                "e", to_json(event, fallback=str),
            ])  # fmt: skip
        for esc in out.escalations.values():
            ops.append(["SET", keys.escalation(esc.id), esc.model_dump_json()])
            ops.append(["ZADD", keys.escalations, str(esc.created_at), esc.id])
        for run_id, key, entry in out.context:
            ops.append(["HSET", keys.run_context(run_id), key, to_json(entry, fallback=str)])
        ops.extend(out.raw)
        if out.resources_changed:
            ops.append(["SET", keys.resources, json.dumps(engine.book.dump())])
        if out.paused_changed:
            if engine.paused is None:
                ops.append(["DEL", keys.paused])
            else:
                ops.append(["SET", keys.paused, engine.paused])
        return ops

    # -- reads ----------------------------------------------------------------------------
    async def run(self, run_id: str) -> RunState | None:
        return read_run(await self.client.hgetall(self.keys.run(run_id)))

    async def missing_runs(self, run_ids: list[str]) -> list[str]:
        """Which of these runs Redis no longer holds (one pipelined EXISTS)."""
        if not run_ids:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.exists(self.keys.run(run_id))
            present = await pipe.execute()
        return [r for r, there in zip(run_ids, present, strict=True) if not there]

    async def active_run_ids(self) -> list[str]:
        return sorted(m.decode() for m in await self.client.smembers(self.keys.active_runs()))

    async def runs(self, run_ids: list[str]) -> list[RunState]:
        if not run_ids:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(self.keys.run(run_id))
            found = [read_run(fields) for fields in await pipe.execute()]
        return [run for run in found if run is not None]

    async def save_run(self, run: RunState) -> None:
        """Write a whole run outside the engine (tools and tests; the engine commits)."""
        for op in run_fields(self.keys.run(run.run_id), run, list(run.cues), fresh=True):
            await self.client.execute_command(*op)

    async def recent_run_ids(self, limit: int = 100) -> list[str]:
        ids = await self.client.zrevrange(self.keys.all_runs, 0, limit - 1)
        return [i.decode() for i in ids]

    async def escalation(self, esc_id: str) -> Escalation | None:
        raw = await self.client.get(self.keys.escalation(esc_id))
        return Escalation.model_validate_json(raw) if raw else None

    async def escalations(self, limit: int = 200) -> list[Escalation]:
        ids = await self.client.zrevrange(self.keys.escalations, 0, limit - 1)
        if not ids:
            return []
        raws = await self.client.mget([self.keys.escalation(i.decode()) for i in ids])
        return [Escalation.model_validate_json(r) for r in raws if r]

    async def context(self, run_id: str) -> dict[str, dict[str, Any]]:
        raw = await self.client.hgetall(self.keys.run_context(run_id))
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    async def resources(self) -> dict[str, Any] | None:
        raw = await self.client.get(self.keys.resources)
        return json.loads(raw) if raw else None

    async def paused(self) -> str | None:
        raw = await self.client.get(self.keys.paused)
        return raw.decode() if raw else None

    async def events(
        self, run_id: str, after: str = "0-0", count: int = 500
    ) -> list[tuple[str, dict[str, Any]]]:
        rows = await self.client.xrange(
            self.keys.run_events(run_id), min=f"({after}" if after != "0-0" else "-", count=count
        )
        return [(i.decode(), json.loads(f[b"e"])) for i, f in rows]
