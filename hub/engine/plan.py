"""A pinned cuelist version indexed for the engine: predecessors, successors, triggers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocols.contracts import Contract
from protocols.cuelist import Cue, Cuelist


@dataclass
class Plan:
    """Everything the engine asks of a cuelist, computed once per version."""

    cuelist: Any  # protocols.cuelist.Cuelist (validated, defaults merged)
    version: str
    cues: dict[str, Any] = field(default_factory=dict)
    preds: dict[str, list[str]] = field(default_factory=dict)
    succs: dict[str, list[str]] = field(default_factory=dict)
    followed_by: dict[str, str] = field(default_factory=dict)  # cue -> its auto_follow
    entries: frozenset[str] = frozenset()  # cues a run start fires
    order: list[str] = field(default_factory=list)  # declaration order
    agents: frozenset[str] = frozenset()  # every agent some cue's target_agents names
    debuggers: frozenset[str] = frozenset()  # agents some cue's on_repeated_failure names
    by_target: tuple[str, ...] = ()  # cues with a `target:` (resolved when they fire)
    ahead: int = 1  # the largest numeric `warn_ahead` of its cues
    ahead_all: bool = False  # some cue has `warn_ahead: all`
    raisers: dict[str, tuple[str, ...]] = field(default_factory=dict)  # flag -> cues raising it
    stand_in_for_gone: bool = False  # made by `stand_in`: no plan of its version for another run

    @classmethod
    def build(cls, cuelist: Any, version: str) -> Plan:
        plan = cls(cuelist=cuelist, version=version)
        for cue in cuelist.cues:
            plan.cues[cue.id] = cue
            plan.order.append(cue.id)
            plan.preds.setdefault(cue.id, [])
            plan.succs.setdefault(cue.id, [])
        for cue in cuelist.cues:
            for dep in cue.depends_on:
                _edge(plan, dep, cue.id)
            if cue.auto_follow:
                plan.followed_by[cue.id] = cue.auto_follow
                _edge(plan, cue.id, cue.auto_follow)
        plan.entries = frozenset(cuelist.start if cuelist.start else plan.order[:1])
        plan.agents = frozenset(a for cue in cuelist.cues for a in cue.fixed_agents)
        plan.debuggers = frozenset(
            cue.on_repeated_failure.debugger for cue in cuelist.cues if cue.on_repeated_failure
        )
        plan.agents |= plan.debuggers
        plan.by_target = tuple(cue.id for cue in cuelist.cues if cue.target is not None)
        plan.raisers = {flag: tuple(ids) for flag, ids in cuelist.raisers().items()}
        # a distance never exceeds the number of cues: a `warn_ahead` that large is `all`
        count = len(cuelist.cues)
        numbers = [c.warn_ahead for c in cuelist.cues
                   if isinstance(c.warn_ahead, int) and c.warn_ahead < count]  # fmt: skip
        plan.ahead = max(numbers, default=0)
        plan.ahead_all = len(numbers) < count
        return plan

    @classmethod
    def stand_in(cls, name: str, version: str, called: dict[str, list[str]]) -> Plan:
        """A plan for a run whose cuelist version is gone (deleted while the run went on):
        its cues by id, each naming the agents it called (`called`), with no edges nor
        triggers. Enough to stand the run's calls down and end it; nothing fires from it."""
        cues = [Cue.model_construct(id=cue_id, target_agents=agents)
                for cue_id, agents in called.items()]  # fmt: skip
        plan = cls.build(Cuelist.model_construct(cuelist=name, cues=cues), version)
        plan.stand_in_for_gone = True
        return plan

    @property
    def name(self) -> str:
        return str(self.cuelist.cuelist)

    @property
    def strategy(self) -> Any:
        return self.cuelist.conflict_strategy

    def contract(self, agent: str) -> Contract | None:
        found: Contract | None = (self.cuelist.specialists or {}).get(agent)
        return found

    def after(self, cue_id: str) -> set[str]:
        """Every cue that waits, directly or not, for `cue_id`."""
        seen: set[str] = set()
        todo = list(self.succs[cue_id])
        while todo:
            succ = todo.pop()
            if succ not in seen:
                seen.add(succ)
                todo.extend(self.succs[succ])
        return seen

    def auto_followed_by(self, cue_id: str) -> list[str]:
        """Predecessors that name `cue_id` in their auto_follow."""
        return [p for p in self.preds[cue_id] if self.followed_by.get(p) == cue_id]


def _edge(plan: Plan, a: str, b: str) -> None:
    if a not in plan.preds[b]:  # depends_on and auto_follow may name the same edge
        plan.preds[b].append(a)
        plan.succs[a].append(b)
