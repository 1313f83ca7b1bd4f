"""The engine's state in Redis: the fenced commit, and reads of runs, events, context,
escalations, the resource book and the pause flag (for the driver and the API)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from hub.engine.escalations import OPEN, Escalation
from hub.engine.outbox import Outbox
from hub.engine.resources import BookDump, ResourceBook
from hub.engine.state import RunState
from hub.store import ops
from hub.store.commit import EngineState, FencedCommit
from hub.store.layout import escalation_ids, read_run, run_fields
from protocols.errors import Unreachable
from protocols.keys import Keys
from protocols.transport import Storage

EVENT_FIELD = b"e"  # the one field of a run event entry
BIG_RUN_FIELDS = 256  # a run with more hash fields (about one per cue) is parsed off the loop


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One entry of a run's event stream: its id (for Last-Event-ID) and the event."""

    id: str
    data: dict[str, Any]


class ContextEntry(BaseModel):
    """One entry of a run's shared context, as `task.context` wrote it."""

    value: Any = None
    source: str | None = None
    timestamp: float | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    cue_id: str | None = None


# runs read and decoded at once as a term loads: 10,000 at once held the event loop for
# seconds, and with it the lease renewals of every partition the hub led
LOAD_CHUNK = 200


class StateStore:
    """The fenced commit of engine steps, and every read of engine state."""

    def __init__(
        self, db: Storage, keys: Keys, retention_s: float | None = None, partition: int = 0
    ) -> None:
        """`partition`: the engine partition whose steps `commit` writes and whose active
        runs and resource book it reads (the reads of runs, events and context are any
        partition's)."""
        self.db = db
        self.keys = keys
        self.partition = partition
        self._commit = FencedCommit(db, keys, retention_s, partition)

    @classmethod
    def own_connections(cls, url: str, keys: Keys, *, max_connections: int) -> StateStore:
        """A store on a client and pool of its own, for readers that must never take a
        connection the engine needs (closing it closes them)."""
        return cls(Storage.dedicated(url, max_connections=max_connections), keys)

    async def close(self) -> None:
        """Close the client when it is this store's own (see `own_connections`)."""
        await self.db.close()

    async def commit(self, out: Outbox, engine: EngineState, lease_value: str) -> None:
        """One engine step, atomically under the fencing token (see hub.store.commit);
        Unreachable, its outcome unknown, when it took past COMMIT_DEADLINE_S."""
        try:
            async with asyncio.timeout(ops.COMMIT_DEADLINE_S):
                await self._commit(out, engine, lease_value)
        except TimeoutError:
            raise Unreachable(
                f"a state write got no answer within {ops.COMMIT_DEADLINE_S:g}s"
            ) from None

    async def replay(self, lease_value: str) -> int:
        """Apply the steps an earlier term journaled but did not finish (a cluster's)."""
        return await self._commit.replay(lease_value)

    # -- runs -----------------------------------------------------------------------------
    async def stored_runs(self, run_ids: Sequence[str]) -> set[str]:
        """Which of these runs Redis holds (one round trip)."""
        found = await self.db.exists_each([self.keys.run(run_id) for run_id in run_ids])
        return {run_id for run_id, there in zip(run_ids, found, strict=True) if there}

    async def run(self, run_id: str) -> RunState | None:
        """The run as Redis holds it. A big one (thousands of cues: hundreds of ms to parse)
        is parsed in a worker thread, so the event loop the engine and the lease share
        keeps its time while an API client reads it."""
        return await _parsed(await self.db.hgetall(self.keys.run(run_id)))

    async def runs(self, run_ids: list[str]) -> list[RunState]:
        """The runs that exist of these, in one round trip."""
        return [run for run, _ in await self.runs_and_escalations(run_ids)]

    async def runs_and_escalations(self, run_ids: list[str]) -> list[tuple[RunState, list[str]]]:
        """The runs that exist of these, each with the ids of the escalations raised in
        it (a new leader's: see hub.store.layout), in one round trip."""
        out: list[tuple[RunState, list[str]]] = []
        for at in range(0, len(run_ids), LOAD_CHUNK):  # a round trip a chunk: the loop
            chunk = run_ids[at : at + LOAD_CHUNK]  # (the lease's too) runs between them
            found = await self.db.hgetall_each([self.keys.run(r) for r in chunk])
            for fields in found:
                if (run := await _parsed(fields)) is not None:
                    out.append((run, escalation_ids(fields)))
        return out

    async def missing_runs(self, run_ids: list[str]) -> list[str]:
        """Which of these runs Redis no longer holds (one pipelined EXISTS)."""
        if not run_ids:
            return []
        present = await self.db.exists_each([self.keys.run(r) for r in run_ids])
        return [r for r, there in zip(run_ids, present, strict=True) if not there]

    async def active_run_ids(self) -> list[str]:
        return sorted(
            m.decode() for m in await self.db.smembers(self.keys.active_runs(self.partition))
        )

    async def recent_run_ids(self, limit: int = 100, offset: int = 0) -> list[str]:
        """Up to `limit` run ids, newest first, after the `offset` newest."""
        ids = await self.db.zrange(self.keys.all_runs, offset, offset + limit - 1, desc=True)
        return [i.decode() for i in ids]

    async def runs_after(
        self, limit: int, after: tuple[float, str] | None = None
    ) -> list[tuple[str, float]]:
        """Up to `limit` runs of the index, newest first, with their scores (creation
        times), older than `after` (a (score, run id) read last): a cursor, which runs
        created or forgotten meanwhile do not shift as they shift an offset."""
        key = self.keys.all_runs
        if after is None:
            rows = await self.db.zrange_scored(key, 0, limit - 1, desc=True)
            return [(m.decode(), at) for m, at in rows]
        score, last = after
        # its ties first (as the index orders them: by id, downwards), then older ones
        level = await self.db.zrange_down_from(key, repr(score), repr(score))
        ties = [(run_id, at) for m, at in level if (run_id := m.decode()) < last][:limit]
        if len(ties) == limit:
            return ties
        older = await self.db.zrange_down_from(key, f"({score!r}", "-inf", limit - len(ties))
        return ties + [(m.decode(), at) for m, at in older]

    async def expired_run_ids(
        self, created_before: float, count: int = 1_000, offset: int = 0
    ) -> tuple[list[str], int]:
        """Of the `count` runs in the index created before `created_before` after the
        `offset` oldest, those whose state Redis no longer holds (retention expired it):
        what `forget_runs` may drop; and how many were read."""
        old = [
            i.decode()
            for i in await self.db.zrange_below(self.keys.all_runs, created_before, count, offset)
        ]
        return await self.missing_runs(old), len(old)

    async def forget_runs(self, run_ids: list[str]) -> int:
        """Drop runs from the index (their state has expired)."""
        return await self.db.zrem(self.keys.all_runs, run_ids)

    async def save_run(self, run: RunState) -> None:
        """Write a whole run outside the engine (tools and tests; the engine commits)."""
        for op in run_fields(self.keys.run(run.run_id), run, list(run.cues), fresh=True):
            await self.db.command(*op)

    # -- what runs wrote ------------------------------------------------------------------
    async def events(self, run_id: str, after: str = "0-0", count: int = 500) -> list[RunEvent]:
        """The run's events after entry `after` ("0-0": from the first), oldest first."""
        start = "-" if after == "0-0" else after
        rows = await self.db.xrange(self.keys.run_events(run_id), start, count)
        return [run_event(entry_id, fields) for entry_id, fields in rows]

    async def events_position(self, run_id: str) -> str:
        """The id of the run's newest event ("0-0": none yet). Read before the run: each
        step writes its state and its events at once, so every event up to this id is in
        the state read after it, and the events after it are news to that reader."""
        return await self.db.newest_id(self.keys.run_events(run_id))

    async def tail_events(
        self, run_id: str, after: str, count: int, block_ms: int
    ) -> list[RunEvent]:
        """Events after `after`, waiting up to `block_ms` for the next ones."""
        rows = await self.db.xread(self.keys.run_events(run_id), after, count, block_ms)
        return [run_event(entry_id, fields) for entry_id, fields in rows]

    async def tail_runs(
        self, after: Mapping[str, str], count: int, block_ms: int
    ) -> dict[str, list[RunEvent]]:
        """New events of several runs in one blocking XREAD: run id -> its events after
        the entry id `after` names for it (runs with none new are left out)."""
        runs = {self.keys.run_events(run_id): run_id for run_id in after}
        found = await self.db.xread_many(
            {stream: after[run_id] for stream, run_id in runs.items()}, count, block_ms
        )
        return {
            runs[stream]: [run_event(entry_id, fields) for entry_id, fields in entries]
            for stream, entries in found
            if stream in runs and entries
        }

    async def context(self, run_id: str) -> dict[str, ContextEntry]:
        raw = await self.db.hgetall(self.keys.run_context(run_id))
        return {k.decode(): ContextEntry.model_validate_json(v) for k, v in raw.items()}

    # -- engine-wide state ----------------------------------------------------------------
    async def escalation(self, esc_id: str) -> Escalation | None:
        raw = await self.db.get(self.keys.escalation(esc_id))
        return Escalation.model_validate_json(raw) if raw else None

    async def escalations(self, limit: int = 200) -> list[Escalation]:
        """The newest `limit` escalations, newest first."""
        ids = await self.db.zrange(self.keys.escalations, 0, limit - 1, desc=True)
        return await self.escalations_named([i.decode() for i in ids])

    async def escalations_named(self, esc_ids: Sequence[str]) -> list[Escalation]:
        """These escalations, those Redis holds (one MGET; one per slot on a cluster)."""
        raws = await self.db.mget([self.keys.escalation(i) for i in esc_ids])
        return [Escalation.model_validate_json(r) for r in raws if r]

    async def expired_escalation_ids(
        self, cutoff: float, count: int = 1_000, offset: int = 0
    ) -> tuple[list[str], int]:
        """Of the `count` escalations raised before `cutoff` after the `offset` oldest,
        those `forget_escalations` may drop: gone already, of a run Redis no longer holds
        (its retention expired it), or of no run and closed before `cutoff`; and how many
        were read."""
        ids = [
            i.decode()
            for i in await self.db.zrange_below(self.keys.escalations, cutoff, count, offset)
        ]
        raws = await self.db.mget([self.keys.escalation(i) for i in ids])
        gone: list[str] = []
        of_run: dict[str, list[str]] = {}
        for esc_id, raw in zip(ids, raws, strict=True):
            if raw is None:
                gone.append(esc_id)
                continue
            esc = Escalation.model_validate_json(raw)
            if esc.run_id is not None:
                of_run.setdefault(esc.run_id, []).append(esc_id)
            elif esc.status != OPEN and esc.updated_at < cutoff:
                gone.append(esc_id)
        for run_id in await self.missing_runs(list(of_run)):
            gone += of_run[run_id]
        return gone, len(ids)

    async def forget_escalations(self, esc_ids: list[str]) -> int:
        """Drop escalations, their records and their place in the index."""
        if not esc_ids:
            return 0
        await self.db.delete(*[self.keys.escalation(i) for i in esc_ids])
        return await self.db.zrem(self.keys.escalations, esc_ids)

    async def open_escalation_ids(self) -> set[str]:
        """The open escalations of no run (see Keys.open_escalations)."""
        return {m.decode() for m in await self.db.smembers(self.keys.open_escalations)}

    async def resources(self) -> ResourceBook | None:
        raw = await self.db.get(self.keys.resources(self.partition))
        return ResourceBook.load(BookDump.model_validate_json(raw)) if raw else None

    async def paused(self) -> str | None:
        raw = await self.db.get(self.keys.paused)
        return raw.decode() if raw else None


def run_event(entry_id: str, fields: dict[bytes, bytes]) -> RunEvent:
    data: dict[str, Any] = json.loads(fields[EVENT_FIELD])
    return RunEvent(entry_id, data)


async def _parsed(fields: dict[bytes, bytes]) -> RunState | None:
    """`read_run`, in a worker thread for a big run (thousands of cues: hundreds of ms), so
    the event loop the engine and the lease share keeps its time."""
    if len(fields) > BIG_RUN_FIELDS:
        return await asyncio.to_thread(read_run, fields)
    return read_run(fields)
