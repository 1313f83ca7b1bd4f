"""A step's operations: flat for the commit scripts, packed for the journal, by slot.

One-key commands, their words flat in ARGV with each key's index in KEYS (`flat`, run by
`OPS_LUA`); packed into bytes for the cluster's journal (`pack`, `unpack`); grouped by the
slot of their key (`by_slot`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hub.store.layout import Op
from protocols.keys import key_slot

COMMIT_RETRY_S = 10.0  # a commit (any of its scripts) is retried this long on a lost link
# A commit's whole time, its first try and every retry: a reply that never comes (a frozen
# node, a half-dead link) would hold the engine for ever while the lease, on other
# connections, kept renewing, and no other hub took over. Past it the outcome is unknown
# and the term ends (Unreachable); the next term reads what Redis holds.
COMMIT_DEADLINE_S = 2 * COMMIT_RETRY_S
# a commit's id outlives every try of it (they all fall within COMMIT_DEADLINE_S)
COMMIT_ID_TTL_MS = int(3 * COMMIT_RETRY_S * 1000)
# The commands an operation may be: each takes exactly one key, its second word. XADDS is
# callboard's: many entries of one field appended to one stream, in order, as `XADDS key
# maxlen field value...` (`maxlen` "" for none, else trimmed as MAXLEN ~), the words a
# step's messages to one stream or a run's events would take once each, written once.
SINGLE_KEY = frozenset(
    {"HSET", "HDEL", "SADD", "SREM", "ZADD", "XADD", "XADDS", "XACK", "SET", "DEL", "PEXPIRE",
     "PERSIST"}
)  # fmt: skip
# Runs the operations in ARGV from ARGV[3] on (shared with the cluster's apply script). An
# operation that fails (a pcall's error) names its key in the reply; the rest go on.
OPS_LUA = """local i, last, done, names, named = 3, #ARGV, 0, {}, {}
local function tally(key, reply)
  if type(reply) == 'table' and reply.err then
    if not named[key] then
      named[key] = true
      names[#names + 1] = key
    end
  else
    done = done + 1
  end
end
while i <= last do
  local n = tonumber(ARGV[i])
  local key = KEYS[tonumber(ARGV[i + 2])]
  if ARGV[i + 1] == 'XADDS' then
    local maxlen, field = ARGV[i + 3], ARGV[i + 4]
    for j = i + 5, i + n do
      if maxlen == '' then
        tally(key, redis.pcall('XADD', key, '*', field, ARGV[j]))
      else
        tally(key, redis.pcall('XADD', key, 'MAXLEN', '~', maxlen, '*', field, ARGV[j]))
      end
    end
  else
    ARGV[i + 2] = key
    tally(key, redis.pcall(unpack(ARGV, i + 1, i + n)))
  end
  i = i + n + 1
end
if #names > 0 then
  table.insert(names, 1, done)
  return names
end
return done
"""


def flat(ops: Sequence[Op], keys: list[str]) -> list[Any]:
    """The script's operation words, each op's key replaced by its index in `keys` (1-based,
    as Lua counts), which gains every key not yet in it. Values go as they are, packed by
    hiredis: no JSON to build here and to decode in Lua. (About 0.1 us per op more than
    the words alone: the commit's hot path.)"""
    index = {key: i for i, key in enumerate(keys, 1)}
    words: list[Any] = []
    append, extend, get = words.append, words.extend, index.get
    for op in ops:
        key = op[1]
        at = get(key)
        if at is None:
            keys.append(key)
            at = index[key] = len(keys)
        if op[0] not in SINGLE_KEY:
            raise ValueError(f"{op[0]} is not a one-key command the commit script can run")
        append(len(op))
        extend(op)
        words[-len(op) + 1] = at  # the key's place: its index in KEYS
    return words


def pack(ops: Sequence[Op]) -> bytes:
    """Operations as bytes: per op its word count, then each word as `length\\n` bytes."""
    out = bytearray()
    for op in ops:
        if op[0] not in SINGLE_KEY:  # refused before it is journaled, not at its replay
            raise ValueError(f"{op[0]} is not a one-key command the commit script can run")
        out += b"%d\n" % len(op)
        for word in op:
            data = word if isinstance(word, bytes) else str(word).encode()
            out += b"%d\n" % len(data)
            out += data
    return bytes(out)


def unpack(data: bytes) -> list[Op]:
    """The operations `pack` wrote (each word as bytes)."""
    ops: list[Op] = []
    at = 0

    def number() -> int:
        nonlocal at
        end = data.index(b"\n", at)
        value = int(data[at:end])
        at = end + 1
        return value

    while at < len(data):
        words: list[Any] = []
        for _ in range(number()):
            size = number()
            words.append(data[at : at + size])
            at += size
        # the command and its key as text, as the engine wrote them
        ops.append([words[0].decode(), words[1].decode(), *words[2:]])
    return ops


def by_slot(ops: Sequence[Op]) -> dict[int, list[Op]]:
    """The operations grouped by the slot of their key, in order within each slot."""
    groups: dict[int, list[Op]] = {}
    for op in ops:
        key = op[1]
        groups.setdefault(key_slot(key if isinstance(key, bytes) else str(key)), []).append(op)
    return groups
