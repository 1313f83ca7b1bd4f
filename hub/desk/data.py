"""Every read the desk makes, in one place: small functions over the hub's stores.

Pages never touch Redis or the store's internals themselves; they call these. Each read is
bounded (a page of runs, the newest N active runs for the inbox, the newest N escalations
and dead letters), so a hub with many runs renders a page in the same time as a small one.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from hub.api import wiring_map
from hub.engine.escalations import OPEN, Escalation
from hub.engine.state import RunState
from hub.registry import Registry
from hub.service import Hub
from protocols.cuelist import Cuelist
from protocols.errors import NotFound
from protocols.graph import CueGraph, raised_by_hand_only
from protocols.states import CueState, RunStatus

PER_PAGE = 50
MAX_RUNS = 5_000  # the board pages through the newest this many runs
INBOX_RUNS = 200  # the inbox looks at the newest this many active runs
ESCALATIONS = 200
DEAD_LETTERS = 100


@dataclass(slots=True)
class RunsPage:
    runs: list[RunState]
    total: int
    page: int
    pages: int


@dataclass(slots=True)
class Approval:
    """A condition some waiting cue needs that no cue of its cuelist raises."""

    run: RunState
    condition: str
    cues: list[str]


@dataclass(slots=True)
class Inbox:
    """What needs an operator, across the newest active runs."""

    armed: list[tuple[RunState, str]] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)  # open, most severe first
    active_runs: int = 0
    looked_at: int = 0

    @property
    def count(self) -> int:
        return len(self.armed) + len(self.approvals) + len(self.escalations)


SEVERITY_ORDER = {"critical": 0, "high": 1, "medium": 2, "low": 3}


async def run(hub: Hub, run_id: str) -> RunState:
    found = await hub.store.run(run_id)
    if found is None:
        raise NotFound(f"no run {run_id}")
    return found


async def cuelist_of(hub: Hub, name: str, version: str) -> Cuelist:
    found: Cuelist = await hub.cuelists.get(name, version)
    return found


async def pinned_cuelist(hub: Hub, run: RunState) -> Cuelist | None:
    """The cuelist version `run` ran, or None once it is deleted: a deleted version stays
    only while some active run is pinned to it, and a finished run's page is drawn from
    the run's own record without it."""
    try:
        return await cuelist_of(hub, run.cuelist, run.version)
    except NotFound:
        return None


async def runs_page(
    hub: Hub, *, status: str | None, cuelist: str | None, page: int, per_page: int = PER_PAGE
) -> RunsPage:
    """Newest first; with a filter the newest MAX_RUNS are read and filtered."""
    page = max(1, page)
    if status is None and cuelist is None:
        ids = await hub.store.recent_run_ids(MAX_RUNS)
        total = len(ids)
        chosen = ids[(page - 1) * per_page : page * per_page]
        runs = await hub.store.runs(chosen)
    else:
        every = await hub.store.runs(await hub.store.recent_run_ids(MAX_RUNS))
        matching = [
            r
            for r in every
            if (status is None or r.status.value == status)
            and (cuelist is None or r.cuelist == cuelist)
        ]
        total = len(matching)
        runs = matching[(page - 1) * per_page : page * per_page]
    return RunsPage(runs, total, page, max(1, math.ceil(total / per_page)))


def operator_needs(cuelist: Cuelist, run: RunState) -> dict[str, list[str]]:
    """The conditions unfinished cues of `run` wait for that only an operator can raise,
    with those cues, as the engine's hold decides (hub.engine.alerts): no unfinished cue
    raises them but the waiting cue itself and those after it (which wait for it)."""
    raisers = cuelist.raisers()

    @functools.cache
    def graph() -> CueGraph:  # built only when some flag has a raiser to place
        return CueGraph.from_cuelist(cuelist)

    needed: dict[str, list[str]] = {}
    for cue in cuelist.cues:
        cr = run.cues.get(cue.id)
        if cr is None or cr.state.done:
            continue
        for flag in cue.conditions:
            if flag in run.conditions:
                continue
            live = [c for c in raisers.get(flag, ()) if _unfinished(run, c)]
            if raised_by_hand_only(cue.id, live, lambda c: graph().descendants(c)):
                needed.setdefault(flag, []).append(cue.id)
    return needed


def _unfinished(run: RunState, cue_id: str) -> bool:
    cr = run.cues.get(cue_id)
    return cr is None or not cr.state.done


async def approvals_of(hub: Hub, run: RunState) -> list[Approval]:
    """The operator-only conditions that waiting cues of `run` need and do not have yet."""
    if run.status.done:
        return []
    cuelist = await pinned_cuelist(hub, run)
    if cuelist is None:  # it ended, and its version was swept, since it was read
        return []
    needed = operator_needs(cuelist, run)
    return [Approval(run, name, cues) for name, cues in sorted(needed.items())]


async def escalations(hub: Hub, limit: int = ESCALATIONS) -> list[Escalation]:
    return list(await hub.store.escalations(limit))


def open_by_severity(escs: list[Escalation]) -> list[Escalation]:
    found = [e for e in escs if e.status == OPEN]
    return sorted(found, key=lambda e: (SEVERITY_ORDER.get(e.severity.value, 9), -e.created_at))


async def inbox(hub: Hub) -> Inbox:
    """Armed cues, approvals and open escalations, across the newest active runs."""
    active = await hub.active_run_ids()
    newest = sorted(active, reverse=True)[:INBOX_RUNS]  # run ids are time-ordered UUIDv7
    out = Inbox(active_runs=len(active), looked_at=len(newest))
    for r in sorted(await hub.store.runs(newest), key=lambda r: r.created_at, reverse=True):
        if r.status.done:
            continue
        out.armed.extend((r, cue_id) for cue_id, cr in r.cues.items() if cr.state is CueState.ARMED)
        out.approvals.extend(await approvals_of(hub, r))
    out.escalations = open_by_severity(await escalations(hub))  # arbitrations among them
    return out


async def run_escalations(hub: Hub, run_id: str) -> list[Escalation]:
    return [e for e in await escalations(hub) if e.run_id == run_id]


async def context(hub: Hub, run_id: str) -> dict[str, dict[str, Any]]:
    return {key: entry.model_dump() for key, entry in (await hub.store.context(run_id)).items()}


async def cuelist_names(hub: Hub) -> list[str]:
    return list(await hub.cuelists.names())


async def describe_cuelist(hub: Hub, name: str) -> dict[str, Any]:
    """Every version, newest first, as plain data: {name, latest, versions: [...]}."""
    described = await hub.cuelists.describe(name)
    return {**described.model_dump(), "latest": described.latest}


async def cuelist_summaries(hub: Hub) -> list[dict[str, Any]]:
    out = []
    for name in await cuelist_names(hub):
        described = await describe_cuelist(hub, name)
        newest = described["versions"][0]
        doc = newest["cuelist"] if isinstance(newest["cuelist"], dict) else {}
        out.append({
            "name": name, "latest": described["latest"], "versions": len(described["versions"]),
            "stored_at": newest["stored_at"], "description": doc.get("description", ""),
            "cues": len(doc.get("cues") or []),
        })  # fmt: skip
    return out


async def agents(registry: Registry) -> list[dict[str, Any]]:
    return list(await registry.describe())


async def wiring(hub: Hub, described_agents: list[dict[str, Any]]) -> dict[str, Any]:
    docs: list[dict[str, Any]] = []
    for name in await cuelist_names(hub):
        doc = (await describe_cuelist(hub, name))["versions"][0]["cuelist"]
        if isinstance(doc, dict):
            docs.append(doc)
    return wiring_map.build(described_agents, docs)


async def dead_letters(hub: Hub, limit: int = DEAD_LETTERS) -> list[dict[str, Any]]:
    return list(await hub.transport.dead_letters(limit))


def is_live(run: RunState) -> bool:
    return run.status in (RunStatus.RUNNING, RunStatus.HOLDING)
