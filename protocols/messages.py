"""Every message type and channel (PROTOCOL.md), each string spelled once, and `channel_of`."""

from __future__ import annotations

from enum import StrEnum


class Channel(StrEnum):
    STATUS = "status"
    TASK = "task"
    ESCALATION = "escalation"
    COORD = "coord"
    BROADCAST = "broadcast"


class MessageType(StrEnum):
    # status.*: specialist -> hub (status.request is the hub's question)
    STATUS_ONLINE = "status.online"
    STATUS_OFFLINE = "status.offline"
    STATUS_STARTED = "status.started"
    STATUS_COMPLETED = "status.completed"
    STATUS_FAILED = "status.failed"
    STATUS_BLOCKED = "status.blocked"
    STATUS_REPORT = "status.report"
    STATUS_REQUEST = "status.request"
    STATUS_REJECTED = "status.rejected"  # asks the hub to dead-letter an entry of its inbox
    # task.*: both ways
    TASK_ASSIGN = "task.assign"
    TASK_HANDOFF = "task.handoff"
    TASK_CONTEXT = "task.context"
    TASK_INPUT = "task.input"  # hub -> specialist: an operator's answer to its question
    # escalation.*: any -> hub -> handler
    ESCALATION_ERROR = "escalation.error"
    ESCALATION_TIMEOUT = "escalation.timeout"
    ESCALATION_CONFLICT = "escalation.conflict"
    ESCALATION_HANDOFF_REJECTED = "escalation.handoff_rejected"
    ESCALATION_PROTOCOL_VIOLATION = "escalation.protocol_violation"
    # coord.*: hub <-> specialist, with the two acks
    COORD_WARNING = "coord.warning"
    COORD_STANDBY = "coord.standby"
    COORD_GO = "coord.go"
    COORD_STANDDOWN = "coord.standdown"
    ACK_WARNING = "ack.warning"
    ACK_STANDBY = "ack.standby"
    # broadcast.*: hub -> all
    BROADCAST_NOTICE = "broadcast.notice"
    BROADCAST_PAUSE = "broadcast.pause"
    BROADCAST_RESUME = "broadcast.resume"
    BROADCAST_SHUTDOWN = "broadcast.shutdown"

    @property
    def channel(self) -> Channel:
        return channel_of(self)


# The acks travel on the coordination channel: they answer coord.warning / coord.standby.
_ACK_PREFIX = "ack."


def channel_of(message_type: str) -> Channel:
    """The routing channel of a message type; unknown types raise."""
    try:
        mt = MessageType(message_type)
    except ValueError:
        from protocols.errors import UnknownMessageType

        raise UnknownMessageType(f"unknown message_type {message_type!r}") from None
    if mt.value.startswith(_ACK_PREFIX):
        return Channel.COORD
    return Channel(mt.value.split(".", 1)[0])


# What a specialist may put on its own `out` stream. Everything else is the hub's to send.
SPECIALIST_SENDS: frozenset[MessageType] = frozenset(
    {
        MessageType.STATUS_ONLINE,
        MessageType.STATUS_OFFLINE,
        MessageType.STATUS_STARTED,
        MessageType.STATUS_COMPLETED,
        MessageType.STATUS_FAILED,
        MessageType.STATUS_BLOCKED,
        MessageType.STATUS_REPORT,
        MessageType.STATUS_REJECTED,
        MessageType.TASK_HANDOFF,
        MessageType.TASK_CONTEXT,
        MessageType.ESCALATION_ERROR,
        MessageType.ESCALATION_TIMEOUT,
        MessageType.ESCALATION_CONFLICT,
        MessageType.ACK_WARNING,
        MessageType.ACK_STANDBY,
    }
)

# What the hub sends to specialists (through `in` streams or the broadcast stream).
HUB_SENDS: frozenset[MessageType] = frozenset(set(MessageType) - SPECIALIST_SENDS) | {
    MessageType.TASK_HANDOFF  # forwarded to the receiver once checked
}

# The hub where a sender is named: who raised an escalation, a node of the wiring map.
HUB = "hub"
