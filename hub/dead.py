"""What the hub dead-letters, and for whom: bad entries of out streams, and the inbox entries
a specialist asks it to (`status.rejected`), each sender within a budget.

A specialist writes nothing but its own out stream, so a dead letter of its inbox is the
hub's to write: the entry is read from that agent's OWN inbox by the id it names, never
taken from the message (so no one can forge one), and dead-lettered once. Every sender has
a budget of letters (a token bucket) and a share of the capped dead-letter stream (a tenth
of its letters, counted by the ids this hub wrote that the stream still holds): a sender's
flood, however slow, must not push everyone else's letters out of it. What is over the
budget or the share is still acknowledged and counted on the sender's protocol violation
(and in a metric), just not copied. An entry
rejected that calls its sender to a cue (a WARNING, STANDBY, GO or task.assign the hub
wrote) is also handed back as a `Rejection`, so the attempt fails now (hub.engine.guard)
rather than at its phase's timeout.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from hub.engine.guard import CALLED_IN
from hub.metrics import Metrics
from protocols import payloads as p
from protocols.codec import Envelope
from protocols.keys import Keys, is_entry_id
from protocols.transport import Delivery, Transport

log = logging.getLogger(__name__)
SENDERS_KEPT = 10_000  # budgets and recent rejections remembered (LRU): memory stays bounded
REJECTIONS_KEPT = 10_000
MAX_DELIVERIES_SHOWN = 1_000_000_000  # a count beyond is a lie, and str() of a huge int raises
HINT_FIELD_CHARS = 128  # run and cue ids are shorter (see the envelope's limits)
REASON_CHARS = 500  # of a rejection's reason, in the failed attempt's error
SHARE_OF_STREAM = 10  # a sender holds at most 1/10 of the dead-letter stream's letters
OVER_SHARE = " (not dead-lettered: its sender holds its share of the dead-letter stream)"


@dataclass
class Rejection:
    """A call the hub wrote to `sender`'s inbox (what its entry says), dead-lettered at the
    sender's request: its attempt cannot go on with the sender."""

    sender: str
    message_type: str
    run_id: str
    cue_id: str
    attempt: int
    reason: str
    letter_id: str | None = None  # the dead letter written (None: over the sender's budget)


def call_of(entry: Delivery) -> tuple[str, str, str, int] | None:
    """(message type, run, cue, attempt) of an inbox entry that calls its agent to a cue: one
    the hub wrote, so its bytes are read whole however long they are (an entry past the
    specialist's size limit is one reason to reject it), yet still checked."""
    try:
        data = json.loads(entry.raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(payload := data.get("payload"), dict):
        return None
    kind, run_id, cue_id = data.get("message_type"), data.get("run_id"), data.get("cue_id")
    attempt = payload.get("attempt", 1)
    if kind not in CALLED_IN or not isinstance(run_id, str) or not isinstance(cue_id, str):
        return None
    if type(attempt) is not int or attempt < 1:
        return None
    return str(kind), run_id, cue_id, attempt


@dataclass
class Bad:
    """An entry the hub refused (or a rejection it could not honour), for the engine to
    count as a protocol violation of `sender`."""

    delivery: Delivery  # the entry of the sender's out stream
    cause: str  # a kind from a fixed set (never text the sender chose)
    detail: str
    sender: str
    letter_id: str | None = None  # the dead letter written, when one was
    run_id: str | None = None  # what the body says it is about, when it says (unchecked)
    cue_id: str | None = None


class Budgets:
    """A token bucket per sender, `burst` letters at most, refilled at `per_s`."""

    def __init__(
        self, burst: int, per_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst, self.per_s, self.clock = burst, per_s, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, sender: str) -> bool:
        now = self.clock()
        tokens, at = self._buckets.pop(sender, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
        allowed = tokens >= 1.0
        self._buckets[sender] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > SENDERS_KEPT:
            self._buckets.popitem(last=False)
        return allowed


class Shares:
    """Each sender's share of the capped dead-letter stream (a tenth of its letters),
    counted by the ids of the letters this hub wrote for it that the stream still holds.
    One a hub, for all its partitions: a sender picks a bad entry's partition by the run id
    it writes, and one count a partition would give it a share in each."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.share = max(1, transport.deadletter_maxlen // SHARE_OF_STREAM)
        # sender -> the ids (oldest first) of its letters written here, maybe still held
        self._held: OrderedDict[str, deque[tuple[int, int]]] = OrderedDict()
        self._held_total = 0

    async def fits(self, senders: list[str]) -> list[bool]:
        """Whether each of these letters (by sender, in order) fits its sender's share of
        the dead-letter stream. The stream is asked for its oldest letter only when a
        sender would pass its share, or when the ids kept here pile up."""
        wanted = Counter(senders)
        full = any(len(self._held.get(s, ())) + n > self.share for s, n in wanted.items())
        if full or self._held_total > 2 * self.transport.deadletter_maxlen:
            await self._forget_trimmed()
        planned: Counter[str] = Counter()
        fits = []
        for sender in senders:
            room = len(self._held.get(sender, ())) + planned[sender] < self.share
            planned[sender] += room
            fits.append(room)
        return fits

    async def _forget_trimmed(self) -> None:
        """Forget the ids of letters the stream no longer holds (trimmed: older than its
        oldest letter)."""
        oldest = await self.transport.oldest_dead_letter()
        floor = _id_key(oldest) if oldest is not None else (1 << 64, 0)
        for sender in list(self._held):
            ids = self._held[sender]
            while ids and ids[0] < floor:
                ids.popleft()
                self._held_total -= 1
            if not ids:
                del self._held[sender]

    def note(self, sender: str, letter_id: str) -> None:
        """A letter of `sender` was written (senders remembered: SENDERS_KEPT, LRU)."""
        ids = self._held.pop(sender, None) or deque()
        ids.append(_id_key(letter_id))
        self._held[sender] = ids
        self._held_total += 1
        if len(self._held) > SENDERS_KEPT:
            self._held_total -= len(self._held.popitem(last=False)[1])


class DeadLetters:
    """Writes the hub's dead letters; see the module docstring."""

    def __init__(
        self, transport: Transport, keys: Keys, metrics: Metrics, budgets: Budgets,
        shares: Shares | None = None,
    ) -> None:  # fmt: skip
        self.transport = transport
        self.keys = keys
        self.metrics = metrics
        self.budgets = budgets
        # (sender, entry id) dead-lettered -> the call it was, if one: a rejection read again
        # (its step's write failed and the term ended) still fails its attempt, unfetched
        self._rejected: OrderedDict[tuple[str, str], Rejection | None] = OrderedDict()
        self.shares = shares or Shares(transport)  # one a hub: its partitions share it

    async def write(self, bad: list[Bad]) -> None:
        """Dead-letter each bad entry within its sender's budget and share (its XACK is the
        caller's, after the violation is stored), noting the letter's id on it."""
        budgeted = []
        for b in bad:
            self.metrics.violations.labels(b.cause).inc()
            if self._within_budget(b):  # (over it, not even parsed for a hint: no work)
                budgeted.append(b)
        kept = []
        for b, fits in zip(
            budgeted, await self.shares.fits([b.sender for b in budgeted]), strict=True
        ):
            if not fits:
                self.metrics.dead_letters_over_share.labels(b.cause).inc()
                b.detail += OVER_SHARE
                continue
            b.run_id, b.cue_id = reply_hint(b.delivery.raw, self.transport.max_message_bytes)
            kept.append(b)
        items = [(b.delivery, f"{b.cause}: {b.detail}", b.sender) for b in kept]
        for b, letter_id in zip(
            kept, await self.transport.dead_letter_many(items, None), strict=True
        ):
            b.letter_id = letter_id
            self.shares.note(b.sender, letter_id)
            self.metrics.dead_letters.labels(b.cause).inc()

    async def rejected(
        self, requests: list[tuple[Delivery, Envelope, str]]
    ) -> tuple[list[Bad], list[Rejection]]:
        """Honour `status.rejected` (delivery, message, sender) requests: copy each named
        entry of the sender's own inbox to the dead letters. Returns the ones refused (an
        id that is malformed or names no entry), as protocol violations, and the calls to a
        cue among the entries (see `Rejection`)."""
        refused: list[Bad] = []
        calls: list[Rejection] = []
        lettered: list[tuple[Rejection, int]] = []
        wanted: dict[str, list[tuple[Delivery, p.StatusRejected]]] = {}
        for d, msg, sender in requests:
            body = msg.body(p.StatusRejected)
            if not is_entry_id(body.entry_id):
                refused.append(Bad(d, "rejected_bad_id", "status.rejected names no entry id",
                                   sender))  # fmt: skip
            elif (sender, body.entry_id) not in self._rejected:  # once per entry
                wanted.setdefault(sender, []).append((d, body))
            elif (before := self._rejected[sender, body.entry_id]) is not None:
                calls.append(before)  # the engine makes a repeat change nothing
        wanted_letters: list[tuple[Delivery, str, str, Rejection | None]] = []
        done: dict[tuple[str, str], Rejection | None] = {}  # remembered once written
        for sender, asked in wanted.items():
            inbox = self.keys.inbox(sender)
            found = await self.transport.entries_by_id(inbox, [body.entry_id for _, body in asked])
            for d, body in asked:
                entry = found.get(body.entry_id)
                if entry is None:
                    detail = f"status.rejected names {body.entry_id}, not an entry of its inbox"
                    refused.append(Bad(d, "rejected_unknown_entry", detail, sender))
                    continue
                if (sender, body.entry_id) in done:
                    continue  # named twice in this batch
                entry.deliveries = min(body.deliveries, MAX_DELIVERIES_SHOWN)
                call = call_of(entry)
                rejection = None
                if call is not None:
                    rejection = Rejection(sender, *call, reason=body.reason[:REASON_CHARS])
                    calls.append(rejection)
                done[sender, body.entry_id] = rejection
                if self.budgets.take(sender):
                    reason = f"rejected by {sender}: {body.reason}"
                    wanted_letters.append((entry, reason, sender, rejection))
                else:
                    self.metrics.dead_letters_over_budget.labels("rejected").inc()
        fitting = await self.shares.fits([sender for _, _, sender, _ in wanted_letters])
        letters: list[tuple[Delivery, str, str]] = []
        for (entry, reason, sender, rejection), fits in zip(wanted_letters, fitting, strict=True):
            if not fits:
                self.metrics.dead_letters_over_share.labels("rejected").inc()
                continue
            if rejection is not None:  # its letter's id, once written (by position)
                lettered.append((rejection, len(letters)))
            letters.append((entry, reason, sender))
        written = await self.transport.dead_letter_many(letters, None)
        for (_, _, sender), letter_id in zip(letters, written, strict=False):
            self.shares.note(sender, letter_id)
        for rejection, at in lettered:
            rejection.letter_id = written[at] if at < len(written) else None
        for key, rejection in done.items():  # only now: a write that failed is done again
            self._remember(key, rejection)
        for _ in letters:
            self.metrics.dead_letters.labels("rejected").inc()
        return refused, calls

    def _within_budget(self, b: Bad) -> bool:
        if self.budgets.take(b.sender):
            return True
        self.metrics.dead_letters_over_budget.labels(b.cause).inc()
        b.detail += " (not dead-lettered: over the sender's budget of dead letters)"
        return False

    def _remember(self, key: tuple[str, str], rejection: Rejection | None) -> None:
        """Each inbox entry is dead-lettered once, however often it is rejected: this one
        was (or, over its sender's budget, counted), and was the call `rejection` if one."""
        self._rejected[key] = rejection
        if len(self._rejected) > REJECTIONS_KEPT:
            self._rejected.popitem(last=False)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def reply_hint(raw: bytes, max_bytes: int) -> tuple[str | None, str | None]:
    """The run and cue a refused body says it is about, if it parses that far: only to link
    a dead-lettered reply to its cue, never trusted further (the engine checks both)."""
    if len(raw) > max_bytes:
        return None, None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    run_id, cue_id = data.get("run_id"), data.get("cue_id")
    if not (isinstance(run_id, str) and isinstance(cue_id, str)):
        return None, None
    if len(run_id) > HINT_FIELD_CHARS or len(cue_id) > HINT_FIELD_CHARS:
        return None, None
    return run_id, cue_id
