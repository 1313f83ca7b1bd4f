"""Targets by capability: a cue's `target` resolved among online agents when it fires.

The online agents reach the engine as an input (`agents_online`, from the router whenever
the registry changes and from the driver when a term starts), so the engine stays pure.
Resolution happens in `fire`, once per attempt (before the WARNING of a cued cue, before
the task.assign of a direct one) and is recorded on the cue (`resolved`, `targets`) and as
a `targets` event. With too few matches the cue waits in `waiting`, its reason naming the
target, until an agent comes online that makes up the number; it then fires with the
trigger it had. Among more matches than `count`, the least loaded agents win (fewest cues
in a call on this engine), then the least recently chosen, then by name.
"""

from __future__ import annotations

from collections.abc import Mapping

from hub.engine.base import ACTIVE, EngineBase
from hub.engine.state import RunState
from protocols.states import CueState, FiredBy
from protocols.targeting import Candidate, Target, choose, matching

NO_MATCH = "no online agent matches target "  # how the reason of a cue waiting for one starts
PAST_TARGETS_MAX = 64  # agents resolved for earlier attempts (their late replies are late)
MATCHING_KEPT = 4096  # targets whose matching agents are kept (past this, found again)


class TargetsMixin(EngineBase):
    """The engine's part that resolves `target:` cues and re-checks them as agents come
    and go."""

    def targets_of(self, run: RunState, cue_id: str) -> tuple[str, ...]:
        """Who the cue's messages go to: whom a debugger reassigned it to, else its
        `target_agents`, or what its `target` resolved to for the current attempt."""
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        if cr.assigned:  # a debugger reassigned it (hub.engine.debugging)
            return tuple(cr.assigned)
        if cue.target is None:
            return tuple(cue.target_agents)
        return tuple(cr.resolved)

    def resolve_targets(self, run: RunState, cue_id: str, by: FiredBy, quiet: bool = False) -> bool:
        """Resolve the cue's `target` for a new attempt: True when it found enough agents
        (or the cue names fixed agents); False when the cue now waits for one, saying why
        (`quiet`: False and nothing changed, for an early warning). A dry run's engine
        (`stand_ins`) takes stand-in agents instead of waiting, and notes it."""
        cue, cr = self.plans[run.run_id].cues[cue_id], run.cues[cue_id]
        target = cue.target
        if target is None:
            return True
        if cr.assigned:  # a debugger's choice holds while it is online; gone, resolve again
            if all(agent in self.directory for agent in cr.assigned):
                return True
            cr.assigned = None
        found, waiting = self._matching(target)
        chosen, _ = choose(target, found, self.load_of, self.last_chosen)
        if not chosen and quiet:
            return False
        if (
            not chosen and not self.stand_ins and cr.reason == waiting
            and self.waits_for_agents(run, cue_id)
        ):  # fmt: skip
            if cr.awaiting != by:  # an operator's GO: the trigger it fires with, when it does
                cr.awaiting = by
                self.mark_dirty(run, cue_id)
            return False  # else it waits as it did: nothing to write
        cr.target = target.model_dump(mode="json", exclude_none=True)
        self.mark_dirty(run, cue_id)
        if not chosen and self.stand_ins:
            chosen = [f"stand-in-{i}" for i in range(1, (target.count or 1) + 1)]
            run.record.note(
                "waits", f"{cue_id}: no agent matches target {target.describe()}: "
                f"stand-ins {', '.join(chosen)} took its place",
            )  # fmt: skip
        self._retire(run, cue_id, keep=chosen)  # a reply from those now is late
        if not chosen:
            reason = waiting
            if cr.awaiting is None:
                run.record.note("waits", f"{cue_id}: {reason}")
            cr.awaiting = by
            self._set(run, cue_id, CueState.WAITING, reason)
            return False
        cr.awaiting = None
        cr.resolved = list(chosen)
        self._choices += 1
        for agent in chosen:
            self.last_chosen[agent] = self._choices
        self.mark_dirty(run, cue_id)
        self.record_event(
            run, "targets", cue=cue_id, attempt=cr.attempt + 1, target=cr.target,
            agents=list(chosen), matching=found[:20],
        )  # fmt: skip
        return True

    def _retire(self, run: RunState, cue_id: str, keep: list[str]) -> None:
        """The agents of the attempt before become past targets (but those in `keep`)."""
        cr = run.cues[cue_id]
        for agent in cr.resolved:
            if agent not in keep and agent not in cr.past_targets:
                cr.past_targets = [*cr.past_targets, agent][-PAST_TARGETS_MAX:]
        cr.resolved = []

    def load_of(self, agent: str) -> int:
        """Cues in a call (WARNING, STANDBY or GO) on this engine that target the agent."""
        return self.loads.get(agent, 0)

    def track_engaged(self, run: RunState, cue_id: str) -> None:
        """Keep `engaged` (the agents of each cue in a call) and each agent's count of them
        (`loads`) as the cue's state changes."""
        cr, key, loads = run.cues[cue_id], (run.run_id, cue_id), self.loads
        for agent in self.engaged.pop(key, ()):
            if loads[agent] <= 1:
                del loads[agent]
            else:
                loads[agent] -= 1
        if cr.state in ACTIVE:
            agents = self.engaged[key] = tuple(cr.targets)
            for agent in agents:
                loads[agent] = loads.get(agent, 0) + 1

    def _matching(self, target: Target) -> tuple[list[str], str]:
        """The online agents matching `target`, and the reason of a cue waiting for more of
        them: found once per target (a plan's, shared by its runs) while the online agents
        stay the same."""
        known = self.matching_now.get(id(target))
        if known is None or known[0] is not target:
            if len(self.matching_now) >= MATCHING_KEPT:
                self.matching_now.clear()
            found = matching(target, self.directory.values())
            online = f"{len(found)} of {target.count} online" if found else "none online"
            known = (target, found, f"{NO_MATCH}{target.describe()} ({online})")
            self.matching_now[id(target)] = known
        return known[1], known[2]

    def agents_online(self, directory: Mapping[str, Candidate]) -> None:
        """The online agents changed (an agent came online or went offline): cues waiting
        for a target that now matches fire. The same agents again (a replica saying
        `status.online` once more, or an agent flooding it) change nothing: no cue looks."""
        if directory == self.directory:
            return
        self.directory = dict(directory)
        self.matching_now.clear()
        for run in list(self.runs.values()):
            if run.status.done or run.dry:
                continue
            for cue_id in self.plans[run.run_id].by_target:
                cr = run.cues[cue_id]
                if cr.state is CueState.WAITING and cr.awaiting is not None:
                    self.fire(run, cue_id, cr.awaiting)

    def waits_for_agents(self, run: RunState, cue_id: str) -> bool:
        """The cue waits for a matching agent to come online (no operator needed)."""
        cr = run.cues[cue_id]
        return cr.state is CueState.WAITING and cr.awaiting is not None
