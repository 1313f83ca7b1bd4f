"""Early warning, `warn_ahead` cues ahead: who may be warned, and when.

A cue's distance from a GO counts the cues that must still GO before it, itself included:
0 for a cue in GO; 1 for a cue in its own call (WARNING or STANDBY, its predecessors done:
the next to GO); for a cue warned early, one more than the farthest of its unfinished
predecessors. Any other unfinished cue (not called yet, armed for an operator) is not in
motion: no distance. A cue not called yet is warned early once its conditions are raised
and it is at most its `warn_ahead` from a GO (one more than its farthest unfinished
predecessor; `all`: any distance). So `warn_ahead: 1` (the default) warns a cue when
every unfinished predecessor is GO'd; `2` already when they are in their call or warned
early for a GO'd one, so a chain's second cue prepares beside its first; and so on down
the chain. In a DAG a join counts its farthest branch.

Distances only shrink when a cue enters its call (`fire`), leaves early warning (its
predecessors are done) or is GO'd; each then walks its successors through the cues in
motion, as far as a `warn_ahead` of the plan could still reach (`AheadMixin.warn_ahead`).
A cue warned early still goes to STANDBY only when every predecessor is done, and is
stood down when one fails (hub.engine.core.evaluate).
"""

from __future__ import annotations

import math

from hub.engine.base import EngineBase
from hub.engine.plan import Plan
from hub.engine.state import RunState
from protocols.states import Coordination, CueState, FiredBy, OnFailure

UNANCHORED = math.inf  # the distance of a cue not in motion
CALLED = (CueState.WARNING, CueState.STANDBY)  # in a call, before its GO


class AheadMixin(EngineBase):
    """The engine's part that decides which cues are warned early, and how far ahead."""

    def warn_ahead(self, run: RunState, cue_id: str) -> None:
        """The cue came closer to its GO (called, no longer early, or GO'd): warn the cues
        after it that are now close enough. The walk goes on past a cue it warned, and past
        one already in motion only while that is nearer a GO than some cue's numeric
        `warn_ahead`: an `all` cue left behind was not held back by its distance (that
        keeps a GO in a long `all` chain from walking the rest of the chain again)."""
        plan = self.plans[run.run_id]
        if not self.early_warning or not plan.succs[cue_id]:
            return
        hops: dict[str, float] = {}
        if not plan.ahead_all and self._hops(run, plan, cue_id, hops) >= plan.ahead:
            return
        todo = list(reversed(plan.succs[cue_id]))
        while todo:
            succ = todo.pop()
            if run.cues[succ].state in (CueState.PENDING, CueState.WAITING):
                if not self._warn_early(run, plan, succ, hops):
                    continue
                further = plan.ahead_all or hops[succ] < plan.ahead
            else:
                further = self._hops(run, plan, succ, hops) < plan.ahead
            if further:
                todo.extend(reversed(plan.succs[succ]))

    def _warn_early(self, run: RunState, plan: Plan, cue_id: str, hops: dict[str, float]) -> bool:
        """Warn the cue early if its conditions, kind and distance allow; True if warned (a
        cue warned early starts no walk of its own: the walk that warned it goes on)."""
        cue = plan.cues[cue_id]
        if cue.coordination is Coordination.DIRECT or cue.manual or cue.warn_ahead == 0:
            return False
        if any(c not in run.conditions for c in cue.conditions):
            return False
        unfinished = [d for d in plan.preds[cue_id] if not self._satisfied(run, d)]
        if not unfinished:
            return False  # nothing to be early for: evaluation calls it
        distance = 1 + max(self._hops(run, plan, d, hops) for d in unfinished)
        if distance == UNANCHORED or (cue.warn_ahead != "all" and distance > cue.warn_ahead):
            return False
        trigger = self._trigger_when_done(run, cue_id)
        if trigger is None:
            return False
        self.fire(run, cue_id, trigger, early=True)
        cr = run.cues[cue_id]
        if cr.state is CueState.WARNING and cr.early:
            hops[cue_id] = distance
            return True
        return False  # waiting for a matching agent (a `target:`), quietly

    def _hops(self, run: RunState, plan: Plan, cue_id: str, hops: dict[str, float]) -> float:
        """The cue's distance from a GO (see the module), memoised in `hops` for one walk;
        iterative, so an `all` chain of thousands of cues does not recurse."""
        stack = [cue_id]
        while stack:
            top = stack[-1]
            if top in hops:
                stack.pop()
                continue
            cr = run.cues[top]
            if cr.state is CueState.GO:
                hops[top] = 0
            elif cr.state not in CALLED:
                hops[top] = UNANCHORED
            elif not cr.early:
                hops[top] = 1
            else:
                unfinished = [d for d in plan.preds[top] if not self._satisfied(run, d)]
                missing = [d for d in unfinished if d not in hops]
                if missing:
                    stack.extend(missing)
                    continue
                hops[top] = 1 + max((hops[d] for d in unfinished), default=0)
            stack.pop()
        return hops[cue_id]

    def _satisfied(self, run: RunState, pred: str) -> bool:
        """The predecessor lets its successors go: completed, or failed under `continue`."""
        cr = run.cues[pred]
        if cr.state is CueState.COMPLETED:
            return True
        on_failure = self.plans[run.run_id].cues[pred].on_failure
        return cr.state is CueState.FAILED and on_failure is OnFailure.CONTINUE

    def _unfinished(self, run: RunState, cue_id: str) -> bool:
        """Some predecessor of the cue has not let it go yet."""
        return not all(self._satisfied(run, d) for d in self.plans[run.run_id].preds[cue_id])

    def _trigger_when_done(self, run: RunState, cue_id: str) -> FiredBy | None:
        """What will have fired the cue once its predecessors are done (completed, or
        failed under `continue`: either lets an auto-follow go, as `Engine._trigger`)."""
        plan = self.plans[run.run_id]
        if plan.auto_followed_by(cue_id):
            return FiredBy.AUTO_FOLLOW
        return FiredBy.DEPENDENCIES if plan.cues[cue_id].depends_on else None
