"""The published JSON Schemas: equal to what the models generate, and usable on their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from callboard.cli import app
from callboard.schema_cmd import render
from protocols import payloads as p
from protocols.codec import encode, make
from protocols.contracts import Contract
from protocols.messages import MessageType
from protocols.schemas import message_schemas

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "schemas" / "messages"
REGENERATE = "regenerate with `callboard schema --messages --out schemas/messages`"


def test_committed_schemas_are_what_the_models_generate(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["schema", "--messages", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    fresh = {f.name: f.read_text() for f in sorted(tmp_path.iterdir())}
    committed = {f.name: f.read_text() for f in sorted(COMMITTED.iterdir())}
    assert sorted(committed) == sorted(fresh), REGENERATE
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert stale == [], f"{stale} differ from the models: {REGENERATE}"


def test_stdout_form_holds_the_same_schemas() -> None:
    result = CliRunner().invoke(app, ["schema", "--messages"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert {name: render(s) for name, s in printed.items()} == {
        name: render(s) for name, s in message_schemas().items()
    }


def test_every_message_type_has_a_payload_schema_in_the_index() -> None:
    index = json.loads((COMMITTED / "index.json").read_text())
    listed = {t["message_type"]: t for t in index["types"]}
    assert set(listed) == {mt.value for mt in MessageType}
    for entry in listed.values():
        assert (COMMITTED / entry["payload"]).is_file()
    assert listed["status.rejected"]["sent_by"] == ["specialist"]
    assert listed["coord.go"]["sent_by"] == ["hub"]
    assert listed["task.handoff"]["sent_by"] == ["specialist", "hub"]


def _load(name: str) -> Draft202012Validator:
    schema = json.loads((COMMITTED / name).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


SAMPLES = [
    make(
        MessageType.STATUS_ONLINE,
        p.StatusOnline(replica="r1", kind="node", contract=Contract(provides=("x",))),
        from_agent="a",
    ),
    make(
        MessageType.COORD_GO,
        p.CoordGo(cue_id="C", target_agents=["a", "b"], action={"k": [1, 2]}),
        run_id="run-1",
        cue_id="C",
    ),
    make(
        MessageType.TASK_HANDOFF,
        p.TaskHandoff(
            from_agent="a",
            to_agent="b",
            task_id="C",
            handoff_context=p.HandoffContext(next_steps=["test"], build_id="b-1"),  # type: ignore[call-arg]
        ),
        in_reply_to="0190aaaa-0000-7000-8000-000000000000",
    ),
    make(
        MessageType.STATUS_REJECTED,
        p.StatusRejected(entry_id="1-0", reason="undecodable", deliveries=3),
    ),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: m.message_type.value)
def test_messages_the_code_writes_validate_against_the_published_schemas(message: Any) -> None:
    wire = json.loads(encode(message))
    _load("message.json").validate(wire)
    _load("envelope.json").validate(wire)
    _load(f"{message.message_type.value}.json").validate(wire["payload"])


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("ack.standby.json", {"attempt": 0}),
        ("ack.standby.json", {"ready": True, "surprise": 1}),
        ("status.failed.json", {"attempt": 1}),
        ("status.rejected.json", {"entry_id": "1-0", "reason": "x", "deliveries": 0}),
        ("task.context.json", {"key": ""}),
        # a dict's keys too: the schemas let any key through the pattern before
        ("status.completed.json", {"usage": {"counters": {"bad name!": 3}}}),
        ("status.online.json", {"replica": "r", "contract": {"labels": {"bad key!": True}}}),
        ("status.completed.json", {"usage": {"tokens": True}}),
    ],
)
def test_payload_schemas_refuse_what_the_hub_refuses(name: str, bad: dict[str, Any]) -> None:
    assert not _load(name).is_valid(bad)


def test_message_schema_refuses_an_unknown_type_and_a_payload_of_another_type() -> None:
    wire = json.loads(encode(SAMPLES[1]))
    validator = _load("message.json")
    assert not validator.is_valid({**wire, "message_type": "coord.nope"})
    assert not validator.is_valid({**wire, "message_type": "ack.warning"})  # GO's payload
    assert not validator.is_valid({**wire, "v": 2})
