"""Message types, channels and the wire-string rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from protocols.errors import UnknownMessageType
from protocols.messages import HUB_SENDS, SPECIALIST_SENDS, Channel, MessageType, channel_of
from protocols.payloads import PAYLOAD_MODELS

ROOT = Path(__file__).resolve().parents[2]


def test_every_type_has_a_payload_model_and_a_channel() -> None:
    assert set(PAYLOAD_MODELS) == set(MessageType)
    for mt in MessageType:
        assert channel_of(mt.value) is mt.channel


@pytest.mark.parametrize(
    ("mt", "channel"),
    [
        ("status.online", Channel.STATUS),
        ("task.handoff", Channel.TASK),
        ("escalation.conflict", Channel.ESCALATION),
        ("coord.go", Channel.COORD),
        ("ack.standby", Channel.COORD),
        ("broadcast.pause", Channel.BROADCAST),
    ],
)
def test_channel_of(mt: str, channel: Channel) -> None:
    assert channel_of(mt) is channel


@pytest.mark.parametrize("bad", ["", "status", "status.nope", "ack.go", "STATUS.ONLINE", "x.y"])
def test_channel_of_refuses_unknown(bad: str) -> None:
    with pytest.raises(UnknownMessageType):
        channel_of(bad)


def test_specialists_cannot_send_hub_commands() -> None:
    for mt in (MessageType.COORD_GO, MessageType.TASK_ASSIGN, MessageType.BROADCAST_PAUSE):
        assert mt not in SPECIALIST_SENDS
        assert mt in HUB_SENDS


def test_strings_are_unique() -> None:
    values = [mt.value for mt in MessageType]
    assert len(values) == len(set(values))


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_module_outside_protocols_spells_a_message_type() -> None:
    """Two copies of one string fail silently once one changes. One copy, in protocols/."""
    wire = {mt.value for mt in MessageType}
    offenders = []
    for folder in ("hub", "specialists", "callboard", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, value in _string_constants(path):
                if value in wire:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {value!r}")
    assert offenders == [], "spell these through protocols.messages.MessageType"


def test_only_the_transport_imports_redis() -> None:
    """Redis errors are translated in one place; everything else goes through it."""
    offenders = []
    for folder in ("protocols", "hub", "specialists", "callboard"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.is_relative_to(ROOT / "protocols" / "transport"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                if any(n == "redis" or n.startswith("redis.") for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_status_rejected_is_a_specialist_message_with_a_checked_payload() -> None:
    from pydantic import ValidationError

    from protocols.codec import decode, encode, make
    from protocols.payloads import StatusRejected

    assert MessageType.STATUS_REJECTED in SPECIALIST_SENDS
    assert MessageType.STATUS_REJECTED not in HUB_SENDS
    body = StatusRejected(entry_id="1700000000000-0", reason="undecodable", deliveries=2)
    again = decode(encode(make(MessageType.STATUS_REJECTED, body, from_agent="a")))
    assert again.payload == body and body.replica == ""
    with pytest.raises(ValidationError):
        StatusRejected(entry_id="1-0", reason="x", deliveries=0)
