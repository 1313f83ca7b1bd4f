"""Resource leases shared by every run, and the three conflict strategies.

The book lives on the leading hub and is persisted with each state write, so a new leader
resumes it. Claims of several resources are all-or-nothing, so no run holds one resource
while waiting for another: no deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from protocols.states import ConflictStrategy

Holder = tuple[str, str]  # (run_id, cue_id)


@dataclass
class Claim:
    run_id: str
    cue_id: str
    resources: tuple[str, ...]
    priority: int
    strategy: ConflictStrategy
    agents: tuple[str, ...] = ()
    seq: int = 0
    went: bool = False  # GO'd: never pre-empted
    # an open arbitration: when it falls back to priority (kept, so a new leader's timer is)
    fallback_at: float | None = None

    @property
    def holder(self) -> Holder:
        return (self.run_id, self.cue_id)


@dataclass
class Outcome:
    granted: bool
    blocked_by: list[Claim] = field(default_factory=list)  # holders in the way
    preempt: list[Claim] = field(default_factory=list)  # lower holders to stand down
    arbitrate: bool = False  # open an escalation.conflict


class ResourceBook:
    """Who holds which resource, who waits, and arbitration decisions."""

    def __init__(self) -> None:
        self.held: dict[str, Claim] = {}
        self.waiting: dict[Holder, Claim] = {}
        self.preferred: dict[str, Holder] = {}  # resource -> binding arbitration winner
        self._seq = 0

    def claim(self, claim: Claim) -> Outcome:
        """Grant every resource of `claim` at once, or say why not (and whom to stand down)."""
        self._seq += 1
        existing = self.waiting.get(claim.holder)
        claim.seq = existing.seq if existing else self._seq
        if existing is not None and claim.fallback_at is None:
            claim.fallback_at = existing.fallback_at
        in_way = [
            h for r in claim.resources if (h := self.held.get(r)) and h.holder != claim.holder
        ]
        in_way = list({h.holder: h for h in in_way}.values())
        preferred_elsewhere = any(
            self.preferred.get(r, claim.holder) != claim.holder
            and self.preferred[r] in self.waiting
            for r in claim.resources
        )
        if not in_way and not preferred_elsewhere and not self._queued_ahead(claim):
            self._grant(claim)
            return Outcome(granted=True)
        self.waiting[claim.holder] = claim
        if claim.strategy is ConflictStrategy.PRIORITY:
            lower = [h for h in in_way if h.priority < claim.priority and not h.went]
            if lower and len(lower) == len(in_way):
                return Outcome(granted=False, blocked_by=in_way, preempt=lower)
        if claim.strategy is ConflictStrategy.ARBITRATION and in_way:
            decided = all(self.preferred.get(r) for r in claim.resources if r in self.held)
            return Outcome(granted=False, blocked_by=in_way, arbitrate=not decided)
        return Outcome(granted=False, blocked_by=in_way)

    def _queued_ahead(self, claim: Claim) -> bool:
        """Is an earlier (fcfs) or higher (priority) waiter after one of these resources?
        Not for a resource an operator's arbitration gave this claim: the binding decision
        goes first (the holder it stood down is re-queued and must not block it back)."""
        for other in self.waiting.values():
            shared = set(other.resources) & set(claim.resources)
            if other.holder == claim.holder or not shared:
                continue
            if all(self.preferred.get(r) == claim.holder for r in shared):
                continue
            if claim.strategy is ConflictStrategy.FCFS and other.seq < claim.seq:
                return True
            if claim.strategy is not ConflictStrategy.FCFS and other.priority > claim.priority:
                return True
        return False

    def _grant(self, claim: Claim) -> None:
        self.waiting.pop(claim.holder, None)
        for r in claim.resources:
            self.held[r] = claim
            if self.preferred.get(r) == claim.holder:
                del self.preferred[r]

    def mark_go(self, holder: Holder) -> bool:
        """The claims `holder` holds went GO; True when that changed any (the book is to
        be written again)."""
        changed = False
        for claim in self.held.values():
            if claim.holder == holder and not claim.went:
                claim.went = changed = True
        return changed

    def release(self, holder: Holder) -> list[Claim]:
        """Free what `holder` holds or waits for; return waiters now worth retrying, best first."""
        self.waiting.pop(holder, None)
        freed = [r for r, c in self.held.items() if c.holder == holder]
        for r in freed:
            del self.held[r]
        return self.next_waiters(freed)

    def next_waiters(self, freed: list[str]) -> list[Claim]:
        candidates = [c for c in self.waiting.values() if set(c.resources) & set(freed)]

        def rank(c: Claim) -> tuple[int, int, int]:
            preferred = any(self.preferred.get(r) == c.holder for r in c.resources)
            by_priority = c.strategy is not ConflictStrategy.FCFS
            return (0 if preferred else 1, -c.priority if by_priority else 0, c.seq)

        return sorted(candidates, key=rank)

    def prefer(self, resource: str, holder: Holder) -> None:
        """A binding arbitration decision: `holder` gets `resource` next."""
        self.preferred[resource] = holder

    def holder_of(self, resource: str) -> Claim | None:
        return self.held.get(resource)

    def forget_run(self, run_id: str) -> list[Claim]:
        freed: list[str] = []
        for holder in [h for h in self.waiting if h[0] == run_id]:
            del self.waiting[holder]
        for r, c in list(self.held.items()):
            if c.run_id == run_id:
                del self.held[r]
                freed.append(r)
        return self.next_waiters(freed)

    # -- persistence ------------------------------------------------------------------
    def dump(self) -> BookDump:
        return BookDump(
            held={r: ClaimDump.of(c) for r, c in self.held.items()},
            waiting=[ClaimDump.of(c) for c in self.waiting.values()],
            preferred={r: list(h) for r, h in self.preferred.items()},
            seq=self._seq,
        )

    @classmethod
    def load(cls, data: BookDump) -> ResourceBook:
        book = cls()
        claims: dict[Holder, Claim] = {}
        for r, d in data.held.items():
            c = d.claim()
            c = claims.setdefault(c.holder, c)  # one claim of several resources: one object
            book.held[r] = c
        for d in data.waiting:
            c = d.claim()
            book.waiting[c.holder] = c
        book.preferred = {r: (h[0], h[1]) for r, h in data.preferred.items()}
        book._seq = data.seq
        return book


class ClaimDump(BaseModel):
    """A claim as the store keeps it."""

    run_id: str
    cue_id: str
    resources: list[str]
    priority: int
    strategy: ConflictStrategy
    agents: list[str] = Field(default_factory=list)
    seq: int = 0
    went: bool = False
    fallback_at: float | None = None

    @classmethod
    def of(cls, c: Claim) -> ClaimDump:
        return cls(
            run_id=c.run_id, cue_id=c.cue_id, resources=list(c.resources),
            priority=c.priority, strategy=c.strategy, agents=list(c.agents),
            seq=c.seq, went=c.went, fallback_at=c.fallback_at,
        )  # fmt: skip

    def claim(self) -> Claim:
        return Claim(
            run_id=self.run_id, cue_id=self.cue_id, resources=tuple(self.resources),
            priority=self.priority, strategy=self.strategy, agents=tuple(self.agents),
            seq=self.seq, went=self.went, fallback_at=self.fallback_at,
        )  # fmt: skip


class BookDump(BaseModel):
    """The resource book as the store keeps it (one JSON document)."""

    held: dict[str, ClaimDump] = Field(default_factory=dict)
    waiting: list[ClaimDump] = Field(default_factory=list)
    preferred: dict[str, list[str]] = Field(default_factory=dict)  # resource -> [run, cue]
    seq: int = 0
