"""The operator commands any hub's API sends the leading engine, and their replies.

Each command is a model whose type parameter names its reply model, so a reader and mypy
follow a call from the route (`await hub.commands.call(Go(...))` is a GoReply) to the
engine. On the wire a command is one JSON field, told apart by `op`; an answer is one JSON
value on the asker's reply list, carrying the reply or a typed error code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field

from protocols.errors import (
    CallboardError,
    Conflict,
    EngineError,
    NotFound,
    OutOfMemory,
    TransportError,
)
from protocols.ids import new_id


class Reply(BaseModel):
    """Base of every reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")


R = TypeVar("R", bound=Reply)


class Command(BaseModel, Generic[R]):
    """Base of every command; `R` is its reply model (read off the class parameter)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    reply_model: ClassVar[type[Reply]] = Reply
    # the request's Idempotency-Key and the fingerprint of what it asked: a start's key
    # names its run (hub.store.idempotency.IdempotencyHold); any other command's keeps its
    # reply (CommandHold), written in the step that does what it asks
    idempotency_key: str | None = None
    request: str = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        args = cls.__pydantic_generic_metadata__["args"]
        if args and isinstance(args[0], type) and issubclass(args[0], Reply):
            cls.reply_model = args[0]  # on Command[GoReply]; Go inherits it

    def read_reply(self, data: Any) -> R:
        """The reply to this command from its JSON form."""
        return cast(R, self.reply_model.model_validate(data))  # R is reply_model, by the above


class StartRunReply(Reply):
    run_id: str
    status: str
    version: str


class StartRun(Command[StartRunReply]):
    op: Literal["start_run"] = "start_run"
    cuelist: str
    version: str | None = None
    run_id: str
    params: dict[str, Any] = Field(default_factory=dict)
    dry: bool = False
    budget: dict[str, Any] | None = None  # limits merged over the cuelist's `budget:`
    # with an Idempotency-Key, the leader starts the run only while the key names it, and
    # makes the key name it for a day in the same write


class GoReply(Reply):
    state: str
    attempt: int


class Go(Command[GoReply]):
    op: Literal["go"] = "go"
    run_id: str
    cue_id: str


class RetryReply(Reply):
    state: str  # of the cue asked about
    attempt: int
    retried: str  # the cue tried again: that one, or the failed cue a blocked one waits on


class Retry(Command[RetryReply]):
    op: Literal["retry"] = "retry"
    run_id: str
    cue_id: str


class RerunReply(Reply):
    run_id: str
    rerun_of: str
    status: str


class Rerun(Command[RerunReply]):
    op: Literal["rerun"] = "rerun"
    run_id: str  # the run to run again
    new_run_id: str
    from_failure: bool = False


class RaiseConditionReply(Reply):
    conditions: list[str]


class RaiseCondition(Command[RaiseConditionReply]):
    op: Literal["condition"] = "condition"
    run_id: str
    name: str


class CancelReply(Reply):
    status: str


class Cancel(Command[CancelReply]):
    op: Literal["cancel"] = "cancel"
    run_id: str
    reason: str = "cancelled by operator"


class ChangeBudgetReply(Reply):
    status: str
    hold_reason: str | None
    budget: dict[str, Any]  # the run's limits now


class ChangeBudget(Command[ChangeBudgetReply]):
    op: Literal["budget"] = "budget"
    run_id: str
    changes: dict[str, Any]  # limits to set (null removes one); `counters` merge by name


class ResolveReply(Reply):
    id: str
    status: str


class Resolve(Command[ResolveReply]):
    op: Literal["resolve"] = "resolve"
    id: str
    winner: str | None = None
    note: str = ""
    answer: str = ""  # to the agent that asked (an input_required escalation)


class BroadcastReply(Reply):
    sent: str


class Broadcast(Command[BroadcastReply]):
    op: Literal["broadcast"] = "broadcast"
    message_type: str
    payload: dict[str, Any] = Field(default_factory=dict)


AnyCommand = Annotated[
    StartRun | Go | Retry | Rerun | RaiseCondition | Cancel | ChangeBudget | Resolve | Broadcast,
    Field(discriminator="op"),
]


ASKER_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # a name in a key: no separator, no glob


class Request(BaseModel):
    """A command on the wire, with the id its answer is filed under."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default_factory=new_id)
    command: AnyCommand
    # the asker's answer stream (Keys.answers), read for all its commands at once; absent:
    # the answer goes on the command's own list (Keys.reply)
    reply_to: str | None = Field(default=None, pattern=ASKER_PATTERN)


class ErrorCode(StrEnum):
    """Why the engine refused a command; the asking hub raises the matching error."""

    NOT_FOUND = "not_found"  # NotFound: unknown run, cue, escalation (or command)
    CONFLICT = "conflict"  # Conflict: not allowed in the current state
    ENGINE = "engine"  # any other EngineError
    # Redis refused or failed the command's write (out of memory, read-only, unreachable):
    # the asker answers 503, and the command may be tried again
    UNAVAILABLE = "unavailable"
    OUT_OF_MEMORY = "out_of_memory"  # the same, Redis being out of memory (OOM)
    FAILING = "failing"  # it failed on every try (a leader died serving it each time)

    def error(self, detail: str) -> CallboardError:
        classes: dict[ErrorCode, type[CallboardError]] = {
            ErrorCode.NOT_FOUND: NotFound, ErrorCode.CONFLICT: Conflict,
            ErrorCode.UNAVAILABLE: TransportError, ErrorCode.OUT_OF_MEMORY: OutOfMemory,
        }  # fmt: skip
        return classes.get(self, EngineError)(detail)


class Answer(BaseModel):
    """The leader's answer to one request: the reply, or an error code and its detail."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorCode | None = None
    detail: str = ""


def answer_of(reply: Reply) -> bytes:
    """The answer to a command served: its reply, as the asker reads it."""
    return Answer(ok=True, result=reply.model_dump(mode="json")).model_dump_json().encode()
