"""Specialist contracts: what an agent requires, provides and hands to,
loading them from YAML, and checking a handoff against them (statically and at run time)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from protocols.errors import CuelistError, HandoffRejected
from protocols.issues import PATTERN_NAMES, Issue, error, from_validation_error
from protocols.keys import AGENT_ID_PATTERN, is_agent_id
from protocols.targeting import Labels

if TYPE_CHECKING:
    from protocols.payloads import TaskHandoff

ContextKey = Annotated[str, StringConstraints(min_length=1, max_length=256)]
AgentRef = Annotated[str, StringConstraints(pattern=AGENT_ID_PATTERN)]
PATTERN_NAMES[AGENT_ID_PATTERN] = "an agent id (lower case letters, digits, _ . -; up to 63)"


# keys in each of a contract's lists: specialists are untrusted, and every cue whose
# `target` is resolved scans the lists of every online agent
CONTRACT_ITEMS_MAX = 100


class Contract(BaseModel):
    """The interface contract of one specialist."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    requires: Annotated[tuple[ContextKey, ...], Field(max_length=CONTRACT_ITEMS_MAX)] = ()
    provides: Annotated[tuple[ContextKey, ...], Field(max_length=CONTRACT_ITEMS_MAX)] = ()
    handoff_to: Annotated[tuple[AgentRef, ...], Field(max_length=CONTRACT_ITEMS_MAX)] = ()
    description: str = Field(default="", max_length=2000)
    # what targets by capability may filter on (`labels.gpu`); bounded: agents are untrusted
    labels: Labels = Field(default_factory=dict)


def parse_contract(data: Any, file: str | None = None) -> tuple[str | None, Contract]:
    """A contract from plain data: `{agent: {id, requires, provides, handoff_to}}`, or
    the bare mapping. Returns (agent id or None, contract); raises CuelistError."""
    agent_id: str | None = None
    if isinstance(data, dict) and isinstance(data.get("agent"), dict) and len(data) == 1:
        data = dict(data["agent"])
        raw_id = data.pop("id", None)
        if raw_id is not None and not (isinstance(raw_id, str) and is_agent_id(raw_id)):
            raise _refuse(
                file, [error("bad_name", f"{raw_id!r} is not an agent id", key="agent.id")]
            )
        agent_id = raw_id
    if not isinstance(data, dict):
        raise _refuse(file, [error("not_a_mapping", "a contract must be a mapping")])
    try:
        return agent_id, Contract.model_validate(data)
    except ValidationError as exc:
        raise _refuse(file, from_validation_error(exc, known_keys=Contract.model_fields)) from None


def load_contract(text: str, file: str | None = None) -> tuple[str | None, Contract]:
    """A contract file (YAML or JSON), loaded safely. Raises CuelistError naming the line."""
    from protocols.loader import load  # the loader needs Issue only; keep imports one way

    return parse_contract(load(text, file).data, file)


def _refuse(file: str | None, issues: list[Issue]) -> CuelistError:
    return CuelistError([i.model_copy(update={"file": file}) for i in issues])


def handoff_allowed(sender: Contract | None, receiver_id: str) -> bool:
    """The sender's contract lists the receiver in `handoff_to` (unknown sender: allowed)."""
    return sender is None or receiver_id in sender.handoff_to


def check_handoff(
    sender_id: str, sender: Contract | None, receiver_id: str, receiver: Contract | None,
    declared_keys: Iterable[str],
) -> list[str]:  # fmt: skip
    """The keys the receiver requires that neither the sender provides nor the handoff
    declares, in the receiver's order. An unknown receiver requires nothing."""
    if receiver is None:
        return []
    covered = set(declared_keys)
    if sender is not None:
        covered.update(sender.provides)
    return [key for key in receiver.requires if key not in covered]


def verify_handoff(
    sender_id: str, sender: Contract | None, receiver_id: str, receiver: Contract | None,
    declared_keys: Iterable[str],
) -> None:  # fmt: skip
    """The load-time check (the promise): raise HandoffRejected when the receiver is not in
    the sender's `handoff_to` or its requirements are not covered by the sender's
    `provides` and the declared keys; `missing` names the uncovered keys."""
    if not handoff_allowed(sender, receiver_id):
        allowed = ", ".join(sender.handoff_to) if sender and sender.handoff_to else "nobody"
        raise HandoffRejected(
            f"{sender_id} may not hand off to {receiver_id} (its handoff_to: {allowed})"
        )
    missing = check_handoff(sender_id, sender, receiver_id, receiver, declared_keys)
    if missing:
        raise HandoffRejected(
            f"handoff from {sender_id} to {receiver_id} misses {', '.join(missing)}", missing
        )


def missing_in_handoff(receiver: Contract | None, context_keys: Iterable[str]) -> list[str]:
    """The keys the receiver requires that the handoff's actual context lacks, in the
    receiver's order (the run-time check of a handoff). An unknown receiver requires nothing."""
    if receiver is None:
        return []
    present = set(context_keys)
    return [key for key in receiver.requires if key not in present]


def validate_handoff(
    sender_id: str, sender: Contract | None, receiver_id: str, receiver: Contract | None,
    context_keys: Iterable[str],
) -> None:  # fmt: skip
    """The run-time check: was the promise kept? Raise HandoffRejected when the receiver is
    not in the sender's `handoff_to`, or when the handoff's actual context lacks a key the
    receiver requires. The sender's `provides` does not count here: it is what the
    load-time check (verify_handoff) took on trust, and this is where it is verified."""
    if not handoff_allowed(sender, receiver_id):
        allowed = ", ".join(sender.handoff_to) if sender and sender.handoff_to else "nobody"
        raise HandoffRejected(
            f"{sender_id} may not hand off to {receiver_id} (its handoff_to: {allowed})"
        )
    missing = missing_in_handoff(receiver, context_keys)
    if missing:
        raise HandoffRejected(
            f"handoff from {sender_id} to {receiver_id} lacks {', '.join(missing)} "
            f"(required by {receiver_id})",
            missing,
        )


def verify_task_handoff(payload: TaskHandoff, contracts: Mapping[str, Contract]) -> None:
    """The run-time check of one TaskHandoff payload (its actual context against the
    receiver's `requires`); raises HandoffRejected."""
    validate_handoff(
        payload.from_agent, contracts.get(payload.from_agent),
        payload.to_agent, contracts.get(payload.to_agent),
        payload.handoff_context.provided_keys(),
    )  # fmt: skip
