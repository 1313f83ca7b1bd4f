"""The `echo` specialist: does what the cue's `action` says, so tests and demos can script it.

Action keys (all optional):
    prepare_ms   delay its ack.standby (spent in `prepare`, or in the ready check when the
                 WARNING landed on another replica)
    execute_ms   delay its completion
    fail         true: report status.failed; "once": only on attempt 1; a list of agent
                 names: only when this echo serves one of them
    ready        false: answer ack.standby not ready (with `ready_reason`)
    context      {key: value} written to the run's shared context
    handoff      {to, context, work_completed?, next_steps?, ...} sent before completing
    result       {...} reported as the result (default: {"echo": the action})
    usage        {tokens, cost, counters} reported with the result (counted against the
                 run's budget)
Settings (env CALLBOARD_ECHO_*): default `prepare_ms`, `execute_ms`, and a `fail_rate` of
random failures (reproducible with `seed`) for demos.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

from specialists.base import Readiness, Specialist
from specialists.cue import Cue, Handoff, Result
from specialists.errors import Reject


class EchoSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_ECHO_", extra="ignore")

    prepare_ms: int = 0
    execute_ms: int = 0
    fail_rate: float = 0.0  # chance that an execution fails at random
    seed: int | None = None


class ScriptedFailure(Exception):
    """The failure an echo action asked for."""


class Echo(Specialist):
    kind = "echo"

    def __init__(self, *args: Any, echo_settings: EchoSettings | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.echo_settings = echo_settings or EchoSettings()
        self.random = random.Random(self.echo_settings.seed)

    def _ms(self, cue: Cue, name: str) -> float:
        value = cue.action.get(name, getattr(self.echo_settings, name))
        return max(0.0, float(value or 0)) / 1000

    async def prepare(self, cue: Cue) -> None:
        await _pause(self._ms(cue, "prepare_ms"))
        cue.state["prepared"] = True

    async def ready(self, cue: Cue) -> Readiness:
        if not cue.state.get("prepared"):  # the WARNING went to another replica
            await _pause(self._ms(cue, "prepare_ms"))
        if cue.action.get("ready", True) is False:
            return False, str(cue.action.get("ready_reason", "echo told not to be ready"))
        return True

    async def execute(self, cue: Cue) -> Result:
        action = cue.action
        await _pause(self._ms(cue, "execute_ms"))
        fail = action.get("fail", False)
        if isinstance(fail, list):
            fail = self.agent_id in fail
        if fail is True or (fail == "once" and cue.attempt == 1):
            raise ScriptedFailure(f"scripted failure (fail={fail!r}, attempt {cue.attempt})")
        rate = self.echo_settings.fail_rate
        if rate > 0 and self.random.random() < rate:
            raise ScriptedFailure(f"random failure (fail_rate={rate})")
        context = action.get("context") or {}
        if not isinstance(context, dict):
            raise Reject(f"action.context must be a mapping, got {type(context).__name__}")
        handoff = None
        if action.get("handoff"):
            spec = dict(action["handoff"])
            if not isinstance(spec.get("to"), str):
                raise Reject("action.handoff needs a `to` agent")
            handoff = Handoff(
                to=spec.pop("to"),
                context=dict(spec.pop("context", None) or {}),
                **{k: v for k, v in spec.items() if k in _HANDOFF_FIELDS},
            )
        result = action.get("result", {"echo": dict(action)})
        if not isinstance(result, dict):
            raise Reject(f"action.result must be a mapping, got {type(result).__name__}")
        usage = action.get("usage")
        if usage is not None and not isinstance(usage, dict):
            raise Reject(f"action.usage must be a mapping, got {type(usage).__name__}")
        return Result(result=result, context=context, handoff=handoff, usage=usage)


async def _pause(seconds: float) -> None:
    """Sleep for the scripted time; no time at all costs no turn of the event loop."""
    if seconds > 0:
        await asyncio.sleep(seconds)


_HANDOFF_FIELDS = ("work_completed", "artifacts_produced", "next_steps", "constraints")
