"""The built-in debugger's rules: each common shell failure gets its decision, without an LLM."""

from __future__ import annotations

import pytest

from protocols.debugging import Decision, FailedAttempt, FailureHistory
from specialists.builtin.debugger import diagnose


def _history(*errors: str, candidates: tuple[str, ...] = ("b",), **extra: object) -> FailureHistory:
    attempts = [FailedAttempt(attempt=n, error=e, targets=["a"], at=0.0)
                for n, e in enumerate(errors, 1)]  # fmt: skip
    return FailureHistory(
        run_id="r",
        cuelist="c",
        cue_id="C",
        targets=["a"],
        attempts=attempts,
        candidates=list(candidates),
        **extra,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "decision", "rule"),
    [
        ("make timed out after 30s", Decision.RETRY, "timeout"),
        ("exit code 127: sh: cargo: command not found", Decision.REASSIGN, "missing-tool"),
        ("cannot run 'terraform': [Errno 2] No such file or directory", Decision.REASSIGN,
         "missing-tool"),
        ("exit code 137: Killed", Decision.REASSIGN, "out-of-resources"),
        ("write: No space left on device", Decision.REASSIGN, "out-of-resources"),
        ("curl: (7) Failed to connect: Connection refused", Decision.RETRY, "network"),
        ("exit code 1: mkdir: Permission denied", Decision.ABANDON, "permission"),
        ("exit code 2: sh: 1: Syntax error: end of file unexpected", Decision.ABANDON,
         "bad-command"),
    ],
)  # fmt: skip
def test_common_shell_failures(error: str, decision: Decision, rule: str) -> None:
    found = diagnose(_history(error, error))
    assert (found.decision, found.details["rule"]) == (decision, rule)
    assert found.to == ("b" if decision is Decision.REASSIGN else None)
    assert error.splitlines()[-1][:50] in found.diagnosis


def test_a_timeout_doubles_timeout_s_only_when_the_cuelist_allows_it() -> None:
    allowed = diagnose(_history("timed out after 30s", allow=["timeout_s"],
                                action={"timeout_s": 30}))  # fmt: skip
    assert allowed.action == {"timeout_s": 60.0}
    assert diagnose(_history("timed out after 30s", action={"timeout_s": 30})).action == {}


def test_the_same_unknown_error_reassigns_and_different_ones_retry() -> None:
    same = diagnose(_history("boom (attempt 1)", "boom (attempt 2)"))  # numbers aside
    assert same.decision is Decision.REASSIGN and same.details["rule"] == "repeated"
    assert diagnose(_history("boom", "bang")).decision is Decision.RETRY


def test_no_candidate_turns_a_reassign_into_retry_or_abandon() -> None:
    lost = diagnose(_history("exit code 137: Killed", candidates=()))
    assert lost.decision is Decision.ABANDON and lost.to is None
    assert "no other online agent provides the same" in lost.diagnosis
