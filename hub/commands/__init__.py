"""Operator commands: any hub's API asks the leading hub's engine, and waits for its answer.

A command is an entry on the commands stream (read by the leader in a consumer group);
the answer comes back on a short-lived list the asking hub blocks on. `models` holds the
typed commands and replies, `client` the asking side, `server` the leader's side.
"""

from hub.commands.client import CommandClient, LeaderUnavailable
from hub.commands.models import (
    Broadcast,
    BroadcastReply,
    Cancel,
    CancelReply,
    ChangeBudget,
    ChangeBudgetReply,
    Command,
    ErrorCode,
    Go,
    GoReply,
    RaiseCondition,
    RaiseConditionReply,
    Reply,
    Rerun,
    RerunReply,
    Resolve,
    ResolveReply,
    Retry,
    RetryReply,
    StartRun,
    StartRunReply,
    answer_of,
)
from hub.commands.server import CommandServer, Handlers

__all__ = [
    "Broadcast",
    "BroadcastReply",
    "Cancel",
    "CancelReply",
    "ChangeBudget",
    "ChangeBudgetReply",
    "Command",
    "CommandClient",
    "CommandServer",
    "ErrorCode",
    "Go",
    "GoReply",
    "Handlers",
    "LeaderUnavailable",
    "RaiseCondition",
    "RaiseConditionReply",
    "Reply",
    "Rerun",
    "RerunReply",
    "Resolve",
    "ResolveReply",
    "Retry",
    "RetryReply",
    "StartRun",
    "StartRunReply",
    "answer_of",
]
