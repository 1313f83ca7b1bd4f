"""The `debugger` specialist: diagnoses a cue's repeated failure from the history the hub
sends (protocols.debugging), with rules for common shell failures and no LLM.

    a timeout                         retry, doubling `timeout_s` when the cuelist allows it
    exit 127, command not found       reassign: the tool is missing on that agent
    exit 137, killed, out of memory,  reassign: that agent's machine ran out
      no space left on device
    connection refused or reset,      retry: a network or service hiccup
      name resolution, 502/503
    permission denied                 abandon: an operator must grant it
    syntax error, usage               abandon: the command itself is wrong
    anything else                     the same error every time (numbers aside): reassign
                                      (or abandon when no other agent provides the same);
                                      errors that differ: retry (it looks flaky)

A reassign with no candidate (no other online agent provides the same capabilities) falls
back to retry for what looks transient, and to abandon otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError

from protocols.debugging import DEBUG_KEY, Decision, Diagnosis, FailureHistory
from specialists.base import Specialist
from specialists.cue import Cue, Result
from specialists.errors import Reject

DEFAULT_TIMEOUT_S = 60.0  # doubled from, when a timed-out action names no timeout_s


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    decision: Decision
    why: str
    transient: bool = False


RULES = (
    Rule("timeout", re.compile(r"timed out|timeout", re.I), Decision.RETRY,
         "the command ran out of time", transient=True),
    Rule("missing-tool", re.compile(r"exit code 127|command not found|cannot run|"
                                    r"No such file or directory", re.I), Decision.REASSIGN,
         "a tool or file is missing on this agent"),
    Rule("out-of-resources", re.compile(r"exit code 137|\bkilled\b|out of memory|cannot "
                                        r"allocate memory|no space left on device", re.I),
         Decision.REASSIGN, "this agent's machine ran out of memory or disk"),
    Rule("network", re.compile(r"connection (refused|reset)|temporary failure in name "
                               r"resolution|could not resolve host|network is unreachable|"
                               r"\b50[23]\b", re.I), Decision.RETRY,
         "a network or service hiccup", transient=True),
    Rule("permission", re.compile(r"permission denied|operation not permitted|EACCES", re.I),
         Decision.ABANDON, "a permission is missing: an operator must grant it"),
    Rule("bad-command", re.compile(r"syntax error|invalid option|unrecognized option|usage:",
                                   re.I), Decision.ABANDON, "the command itself is wrong"),
)  # fmt: skip


def diagnose(history: FailureHistory) -> Diagnosis:
    """The decision for this failure streak (see the module doc)."""
    errors = [a.error for a in history.attempts]
    last = errors[-1] if errors else ""
    rule = next((r for r in RULES if r.pattern.search(last)), None)
    excerpt = last.strip().splitlines()[-1][:200] if last.strip() else "no error text"
    if rule is None:
        same = len({re.sub(r"\d+", "#", e) for e in errors}) == 1  # attempt numbers aside
        rule = Rule("repeated" if same else "flaky", re.compile(""),
                    Decision.REASSIGN if same else Decision.RETRY,
                    "the same failure on every attempt" if same else "the failures differ",
                    transient=not same)  # fmt: skip
    decision, to, action = rule.decision, None, {}
    if decision is Decision.REASSIGN:
        if history.candidates:
            to = history.candidates[0]
        else:
            decision = Decision.RETRY if rule.transient else Decision.ABANDON
    if decision is Decision.RETRY and rule.name == "timeout" and "timeout_s" in history.allow:
        current = history.action.get("timeout_s")
        base = float(current) if isinstance(current, int | float) else DEFAULT_TIMEOUT_S
        action = {"timeout_s": base * 2}
    text = f"{rule.why} ({len(errors)} failed attempts; last: {excerpt})"
    if rule.decision is Decision.REASSIGN and decision is not Decision.REASSIGN:
        text += "; no other online agent provides the same"
    return Diagnosis(
        decision=decision, diagnosis=text, action=action, to=to,
        details={"rule": rule.name, "attempts": len(errors)},
    )  # fmt: skip


class Debugger(Specialist):
    kind = "debugger"

    async def execute(self, cue: Cue) -> Result:
        raw = cue.action.get(DEBUG_KEY)
        try:
            history = FailureHistory.model_validate(raw)
        except ValidationError as exc:
            why = exc.errors()[0]["msg"]
            raise Reject(f"action.{DEBUG_KEY} is not a failure history: {why}") from None
        return Result(result=diagnose(history).model_dump(mode="json"))
