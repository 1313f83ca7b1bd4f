"""The fenced commit on a Redis Cluster: journal a step in one slot, apply it slot by slot.

Each slot's share of a step is applied exactly once.

A step's operations touch keys of many runs and agents, so many slots: no one script may
run them on a cluster. Instead (the single server keeps its one script, hub/store/commit):

1. *Journal.* One script in the partition's slot (`{p0}`, with the lease) checks the fencing
   value and appends the whole step (its operations, packed) to the partition's journal
   stream, atomically. From here the step is acknowledged: it will be applied.
2. *Apply.* The operations are grouped by slot (their order kept within a slot) and each
   group is applied by one script in its slot. The script first checks the slot's fence
   (the highest fencing token that applied there: an older leader is refused, STALE) and
   sets an `applied` marker for (step, slot): a marker already there makes the group a
   no-op, so a re-applied step is applied once (no XADD twice).
3. *Done.* The journal entry is deleted, then the step's markers.

Before it serves anything, a new leader (and a leader whose apply failed, as its term ends
and the next one starts) replays the journal entries still there, in order, under its own
token: what an old leader journaled is applied once, and the slot fences it raises keep
that old leader's late applies out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from hub.store.layout import Op
from hub.store.ops import (
    COMMIT_ID_TTL_MS,
    COMMIT_RETRY_S,
    OPS_LUA,
    by_slot,
    flat,
    pack,
    unpack,
)
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.transport import Storage

log = logging.getLogger(__name__)

# An applied marker is deleted once its step is done; the TTL only reclaims the markers
# of a step whose entry was deleted but whose markers were not (the hub died between).
APPLIED_TTL_MS = 7 * 24 * 3600 * 1000
COMMIT_FIELD, OPS_FIELD = b"c", b"o"  # a journal entry: the commit id, the packed ops

JOURNAL_LUA = """#!lua
-- KEYS: 1 the leader lease, 2 this commit's id, 3 the journal.
-- ARGV: 1 the fencing value, 2 the commit id's TTL (ms), 3 the commit id, 4 the ops.
-- Returns the journal entry's id (the same one for a retry whose reply was lost, whoever
-- holds the lease by then: it was journaled under the lease, and is not refused).
local seen = redis.call('GET', KEYS[2])
if seen then return seen end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('STALE leader lease lost: state write refused')
end
local entry = redis.call('XADD', KEYS[3], '*', 'c', ARGV[3], 'o', ARGV[4])
redis.call('SET', KEYS[2], entry, 'PX', ARGV[2])
return entry
"""

_APPLY_HEAD = """#!lua
-- KEYS: 1 the slot's fence, 2 the (step, slot) applied marker, 3.. the operations' keys.
-- ARGV: 1 the fencing token, 2 the marker's TTL (ms), then the operations as the single
-- server's commit script takes them.
local fence = tonumber(redis.call('GET', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if token < fence then
  return redis.error_reply('STALE a newer leader applied in this slot: state write refused')
end
if token > fence then redis.call('SET', KEYS[1], ARGV[1]) end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then
  return -1  -- applied before (a replay, or a retry whose reply was lost)
end
"""


def token_of(lease_value: str) -> int:
    """The fencing token in a lease value (`hub_id:token`)."""
    return int(lease_value.rsplit(":", 1)[1])


def _log_retry(exc: BaseException, wait_s: float) -> None:
    log.warning("state write (cluster): %s; retrying in %.2fs", exc, wait_s)


class JournaledCommit:
    """Writes engine steps on a Redis Cluster: journal, apply by slot, done (see above)."""

    def __init__(self, db: Storage, keys: Keys, partition: int = 0) -> None:
        self.db = Storage.sharing(db, retry_s=COMMIT_RETRY_S)
        self.keys = keys
        self.partition = partition
        self.journal_key = keys.journal(partition)
        self._journal = db.script(JOURNAL_LUA)
        self._apply = db.script(_APPLY_HEAD + OPS_LUA)

    async def __call__(self, ops: Sequence[Op], lease_value: str) -> None:
        """Journal the step under the lease (StaleLeader when lost), then apply it."""
        commit_id = new_id()
        keys = [self.keys.leader(self.partition), self.keys.commit(commit_id, self.partition)]
        args: list[str | bytes | int] = [lease_value, COMMIT_ID_TTL_MS, commit_id, pack(ops)]
        entry = await self._journal(
            [*keys, self.journal_key], args, retry_s=COMMIT_RETRY_S, on_retry=_log_retry
        )
        entry_id = entry.decode() if isinstance(entry, bytes) else str(entry)
        await self._apply_step(entry_id, commit_id, ops, token_of(lease_value))

    async def replay(self, lease_value: str) -> int:
        """Apply every journaled step not yet done, oldest first; how many there were."""
        token, replayed = token_of(lease_value), 0
        after = "-"
        while True:
            entries = await self.db.xrange(self.journal_key, after, 100)
            if not entries:
                return replayed
            for entry_id, fields in entries:
                commit_id = fields[COMMIT_FIELD].decode()
                await self._apply_step(entry_id, commit_id, unpack(fields[OPS_FIELD]), token)
                replayed += 1
                after = entry_id
            log.warning("replayed %d journaled state writes", replayed)

    async def _apply_step(
        self, entry_id: str, commit_id: str, ops: Sequence[Op], token: int
    ) -> None:
        groups = by_slot(ops)
        replies = await asyncio.gather(
            *(self._apply_group(slot, commit_id, group, token) for slot, group in groups.items()),
            return_exceptions=True,
        )
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply  # the entry stays: the next term's replay applies what is missing
        for reply in replies:
            if isinstance(reply, list):  # keys that could not take their operation (skipped)
                names = ", ".join(k.decode() if isinstance(k, bytes) else str(k) for k in reply[1:])
                log.error("state write skipped the operations on %s (Redis refused them)", names)
        await self.db.xdel(self.journal_key, [entry_id])
        await self.db.delete(*(self.keys.applied(slot, commit_id) for slot in groups))

    async def _apply_group(self, slot: int, commit_id: str, ops: list[Op], token: int) -> Any:
        keys = [self.keys.slot_fence(slot, self.partition), self.keys.applied(slot, commit_id)]
        args = [token, APPLIED_TTL_MS, *flat(ops, keys)]
        return await self._apply(keys, args, retry_s=COMMIT_RETRY_S, on_retry=_log_retry)
