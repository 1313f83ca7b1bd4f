"""Contracts: loading them, and checking a handoff statically and at run time."""

from __future__ import annotations

import pytest

from protocols.contracts import (
    Contract,
    check_handoff,
    handoff_allowed,
    load_contract,
    missing_in_handoff,
    parse_contract,
    validate_handoff,
    verify_handoff,
    verify_task_handoff,
)
from protocols.errors import CuelistError, HandoffRejected
from protocols.payloads import HandoffContext, TaskHandoff

SEED = """\
agent:
  id: specialist-code
  requires: [task_description, acceptance_criteria]
  provides: [implemented_code, unit_tests]
  handoff_to:
    - specialist-test  # for testing
    - specialist-deploy
"""

CODE = Contract(provides=("implemented_code",), handoff_to=("specialist-test",))
TEST = Contract(requires=("implemented_code", "test_plan"))


def test_the_seed_format_and_a_bare_mapping() -> None:
    agent, contract = load_contract(SEED)
    assert agent == "specialist-code"
    assert contract.handoff_to == ("specialist-test", "specialist-deploy")
    assert parse_contract({"requires": ["a"]}) == (None, Contract(requires=("a",)))


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("agent: {id: Bad Id}", "bad_name"),
        ("agent: {id: a, requires: x}", "wrong_type"),
        ("requires: [a]\nrequire: [b]", "unknown_key"),
        ("- a", "not_a_mapping"),
        ("requires: !!python/object:os.system {}", "unsupported_tag"),
        ("handoff_to: [Not An Agent]", "bad_name"),
    ],
)
def test_bad_contracts_are_refused_with_issues(text: str, code: str) -> None:
    with pytest.raises(CuelistError) as caught:
        load_contract(text, "c.yaml")
    assert caught.value.issues[0].code == code
    assert caught.value.issues[0].file == "c.yaml"


def test_missing_keys_are_those_neither_provided_nor_declared() -> None:
    assert check_handoff("code", CODE, "test", TEST, set()) == ["test_plan"]
    assert check_handoff("code", CODE, "test", TEST, {"test_plan"}) == []
    assert check_handoff("code", None, "test", TEST, set()) == ["implemented_code", "test_plan"]
    assert check_handoff("code", CODE, "test", None, set()) == []


def test_verify_refuses_a_receiver_not_in_handoff_to() -> None:
    assert handoff_allowed(CODE, "specialist-test") and handoff_allowed(None, "anyone")
    with pytest.raises(HandoffRejected) as caught:
        verify_handoff("specialist-code", CODE, "specialist-deploy", None, set())
    assert "specialist-deploy" in str(caught.value) and caught.value.missing == []


def test_verify_names_the_missing_keys() -> None:
    with pytest.raises(HandoffRejected) as caught:
        verify_handoff("specialist-code", CODE, "specialist-test", TEST, {"work_completed"})
    assert caught.value.missing == ["test_plan"]


def test_a_task_handoff_payload_is_checked_with_its_declared_context() -> None:
    contracts = {"specialist-code": CODE, "specialist-test": TEST}

    def payload(**context: object) -> TaskHandoff:
        return TaskHandoff(
            from_agent="specialist-code", to_agent="specialist-test", task_id="CODE-100",
            handoff_context=HandoffContext.model_validate(context),
        )  # fmt: skip

    verify_task_handoff(payload(implemented_code="x.py", test_plan="plan.md"), contracts)
    with pytest.raises(HandoffRejected) as caught:
        verify_task_handoff(payload(next_steps=["run it"]), contracts)
    assert caught.value.missing == ["implemented_code", "test_plan"]


def test_at_run_time_the_senders_provides_is_not_a_substitute_for_the_keys() -> None:
    """The load-time check trusts CODE's `provides: [implemented_code]`; the handoff itself
    must carry it (the run-time check)."""
    verify_handoff("specialist-code", CODE, "specialist-test", TEST, {"test_plan"})  # promise
    assert missing_in_handoff(TEST, {"test_plan"}) == ["implemented_code"]
    assert missing_in_handoff(None, set()) == []
    with pytest.raises(HandoffRejected) as caught:
        validate_handoff("specialist-code", CODE, "specialist-test", TEST, {"test_plan"})
    assert caught.value.missing == ["implemented_code"]
    assert "lacks implemented_code" in str(caught.value)
    with pytest.raises(HandoffRejected, match="may not hand off"):
        validate_handoff("specialist-code", CODE, "specialist-deploy", None, set())
