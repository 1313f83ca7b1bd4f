"""PROTOCOL.md against the code: every message type and payload field, the links, the limits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from protocols.codec import DEFAULT_MAX_MESSAGE_BYTES, Envelope, decode
from protocols.keys import AGENT_ID_PATTERN, STREAM_FIELD, Keys
from protocols.messages import MessageType
from protocols.payloads import PAYLOAD_MODELS
from protocols.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "PROTOCOL.md").read_text()


def _section(message_type: str) -> str:
    """The text under the `####` heading that names `message_type`, up to the next heading."""
    for match in re.finditer(r"^#### (.+)$", DOC, flags=re.M):
        if f"`{message_type}`" in match.group(1):
            rest = DOC[match.end() :]
            end = re.search(r"^#{2,4} ", rest, flags=re.M)
            return rest[: end.start()] if end else rest
    raise AssertionError(f"PROTOCOL.md has no #### section for {message_type}")


@pytest.mark.parametrize("mt", list(MessageType), ids=lambda mt: mt.value)
def test_every_message_type_is_documented_with_every_payload_field(mt: MessageType) -> None:
    section = _section(mt.value)
    assert f"schemas/messages/{mt.value}.json" in section
    missing = [f for f in PAYLOAD_MODELS[mt].model_fields if f"`{f}`" not in section]
    assert missing == [], f"{mt.value}: fields not described in PROTOCOL.md"


def test_every_envelope_field_is_in_the_envelope_table() -> None:
    table = DOC[DOC.index("## The envelope") : DOC.index("**Replies.**")]
    missing = [f for f in Envelope.model_fields if f"| `{f}` |" not in table]
    assert missing == []


def test_relative_links_point_at_files_that_exist() -> None:
    targets = re.findall(r"\]\(((?!https?:|#)[^)]+)\)", DOC)
    assert targets, "PROTOCOL.md links the schemas"
    assert [t for t in targets if not (ROOT / t.split("#")[0]).exists()] == []


def test_limits_and_names_are_the_code_s() -> None:
    defaults = {name: f.default for name, f in Settings.model_fields.items()}
    assert f"{DEFAULT_MAX_MESSAGE_BYTES // 1024} KiB" in DOC
    assert f"exactly one field, named `{STREAM_FIELD}`**" in DOC
    assert AGENT_ID_PATTERN in DOC
    assert f"{defaults['min_idle_ms'] // 1000} s (`CALLBOARD_MIN_IDLE_MS`)" in DOC
    assert f"| {defaults['max_deliveries']}, then it is poison" in DOC
    assert f"`{defaults['prefix']}` unless configured" in DOC


def _json_examples() -> list[object]:
    """Every JSON value in the ```json blocks (a block may hold several, one after another)."""
    found = []
    for block in re.findall(r"```json\n(.*?)```", DOC, flags=re.S):
        text, at = block.strip(), 0
        while at < len(text):
            value, at = json.JSONDecoder().raw_decode(text, at)
            found.append(value)
            while at < len(text) and text[at].isspace():
                at += 1
    return found


def test_the_example_messages_are_valid_messages() -> None:
    examples = _json_examples()
    assert len(examples) >= 3
    schema = json.loads((ROOT / "schemas" / "messages" / "message.json").read_text())
    validator = Draft202012Validator(schema)
    for example in examples:
        validator.validate(example)
        decode(json.dumps(example))  # and the hub's own decoder takes it


def test_the_key_examples_are_the_keys_the_code_builds() -> None:
    keys = Keys("cb:")
    table = DOC[DOC.index("## Keys and who may touch them") : DOC.index("An **agent id**")]
    for built in (
        keys.out("specialist-build"),
        keys.inbox("specialist-build"),
        keys.done("specialist-build", "run-1:CUE-1:1:done"),
        keys.broadcast,
        keys.dead,
        keys.audit,
    ):
        assert f"| `{built}` |" in table
    assert f"XADD {keys.out('specialist-build')} * {STREAM_FIELD} " in DOC
