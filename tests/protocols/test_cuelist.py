"""The cuelist models: keys, types, defaults merged into cues, the default entry cue."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from protocols.canonical import canonical_json
from protocols.cuelist import Cue, Cuelist
from protocols.states import ConflictStrategy, Coordination, OnFailure, Overlap


def cue(cue_id: str = "CUE-100", **extra: Any) -> dict[str, Any]:
    return {"id": cue_id, "target_agents": ["specialist-build"], **extra}


def doc(*cues: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"cuelist": "pipeline", "cues": list(cues) or [cue()], **extra}


def errors(data: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    with pytest.raises(ValidationError) as caught:
        Cuelist.model_validate(data)
    return [(tuple(e["loc"]), e["type"]) for e in caught.value.errors()]


def test_defaults_of_the_language() -> None:
    model = Cuelist.model_validate(doc())
    assert model.overlap is Overlap.SKIP
    assert model.conflict_strategy is ConflictStrategy.PRIORITY
    assert model.start == ["CUE-100"]
    only = model.cues[0]
    assert (only.ack_timeout_s, only.standby_timeout_s, only.go_timeout_s) == (5, 60, 600)
    assert only.on_failure is OnFailure.BLOCK and only.coordination is Coordination.CUED
    assert only.retries == 0 and only.priority == 0 and only.auto_follow is None


def test_defaults_are_merged_and_the_cue_wins() -> None:
    model = Cuelist.model_validate(
        doc(
            {"id": "A", "retries": 1},
            {"id": "B", "target_agents": ["specialist-test"]},
            defaults={"target_agents": ["specialist-build"], "retries": 3, "go_timeout_s": 9},
        )
    )
    first, second = model.cues
    assert first.retries == 1 and first.target_agents == ["specialist-build"]
    assert second.retries == 3 and second.target_agents == ["specialist-test"]
    assert first.go_timeout_s == second.go_timeout_s == 9


def test_a_bad_default_is_reported_once_not_in_every_cue() -> None:
    found = errors(doc(cue("A"), cue("B"), defaults={"retries": "many", "colour": "red"}))
    assert sorted(found) == [(("defaults", "colour"), "extra_forbidden"),
                             (("defaults", "retries"), "int_type")]  # fmt: skip


def test_defaults_cannot_set_ids_or_edges() -> None:
    found = errors(doc(cue("A"), defaults={"depends_on": ["A"], "id": "X"}))
    assert {loc for loc, _ in found} == {("defaults", "depends_on"), ("defaults", "id")}


@pytest.mark.parametrize(
    ("change", "loc", "kind"),
    [
        ({"priorty": 1}, ("cues", 0, "priorty"), "extra_forbidden"),
        ({"target_agents": []}, ("cues", 0, "target_agents"), "too_short"),
        ({"target_agents": ["Not An Agent"]}, ("cues", 0, "target_agents", 0),
         "string_pattern_mismatch"),
        ({"manual": "yes"}, ("cues", 0, "manual"), "bool_type"),
        ({"priority": "5"}, ("cues", 0, "priority"), "int_type"),
        ({"depends_on": "CUE-1"}, ("cues", 0, "depends_on"), "list_type"),
        ({"depends_on": ["A", "A"]}, ("cues", 0, "depends_on"), "duplicate_item"),
        ({"on_failure": "retry"}, ("cues", 0, "on_failure"), "enum"),
        ({"ack_timeout_s": 0}, ("cues", 0, "ack_timeout_s"), "greater_than"),
        ({"handoff": {"to": "specialist-test", "with": []}}, ("cues", 0, "handoff", "with"),
         "extra_forbidden"),
        ({"id": "has space"}, ("cues", 0, "id"), "string_pattern_mismatch"),
    ],
)  # fmt: skip
def test_cue_errors_name_the_key(change: dict[str, Any], loc: tuple[Any, ...], kind: str) -> None:
    assert (loc, kind) in errors(doc(cue(**change)))


def test_every_error_is_listed() -> None:
    found = errors(doc(cue("A", priorty=1), cue("B", manual="no"), cuelist="Bad Name"))
    assert len(found) == 3


@pytest.mark.parametrize("name", ["Pipeline", "-lead", "a_b", "", "x" * 64])
def test_cuelist_names(name: str) -> None:
    assert (("cuelist",), "string_pattern_mismatch") in errors(doc(cuelist=name)) or name == ""


def test_schedule_is_a_cron_expression() -> None:
    assert Cuelist.model_validate(doc(schedule="0 3 * * *")).schedule == "0 3 * * *"
    assert (("schedule",), "bad_schedule") in errors(doc(schedule="61 3 * * *"))


@pytest.mark.parametrize("never", ["0 0 30 2 *", "0 0 31 4 *", "0 0 1 1 * 0 2001"])
def test_a_schedule_that_never_comes_is_refused(never: str) -> None:
    """croniter takes February 30th or a year gone by as valid cron; the scheduler found no
    next time for them, and raised at every tick. A leap day is a schedule."""
    assert (("schedule",), "bad_schedule") in errors(doc(schedule=never))
    assert Cuelist.model_validate(doc(schedule="0 0 29 2 *")).schedule == "0 0 29 2 *"


def test_duplicate_ids_and_empty_lists() -> None:
    assert ((), "duplicate_id") in errors(doc(cue("A"), cue("A")))
    assert (("cues",), "too_short") in errors({"cuelist": "x", "cues": []})
    assert (("start",), "too_short") in errors(doc(start=[]))


def test_inline_contracts() -> None:
    model = Cuelist.model_validate(
        doc(specialists={"specialist-code": {"requires": ["a"], "handoff_to": ["specialist-t"]}})
    )
    assert model.specialists["specialist-code"].requires == ("a",)
    assert (("specialists", "specialist-code", "handoff_to", 0), "string_pattern_mismatch") in (
        errors(doc(specialists={"specialist-code": {"handoff_to": ["Bad Agent"]}}))
    )


def test_canonical_json_reads_back_into_the_same_cuelist() -> None:
    model = Cuelist.model_validate(
        doc(
            cue("A", action={"x": [1, {"y": None}]}, handoff={"to": "specialist-test"}),
            defaults={"retries": 2},
            schedule="*/5 * * * *",
        )
    )
    again = Cuelist.model_validate_json(canonical_json(model))
    assert again.cues == model.cues and again.start == model.start
    assert canonical_json(again) == canonical_json(model)


def test_the_json_schema_names_every_cue_key() -> None:
    schema = Cuelist.model_json_schema()
    assert set(schema["$defs"]["Cue"]["properties"]) == set(Cue.model_fields)
    assert schema["additionalProperties"] is False
