"""The registry stays bounded whatever replica names an agent's messages make up."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from hub.a2a.card import contract_card
from hub.registry import NAME_CHARS, REPLICAS_MAX, Registry
from hub.store.agents import AgentRecord
from protocols import payloads as p
from protocols.codec import decode, make
from protocols.contracts import CONTRACT_ITEMS_MAX, Contract
from protocols.errors import DecodeError
from protocols.keys import Keys
from protocols.messages import MessageType as T


def test_replicas_per_agent_are_bounded_and_live_ones_are_kept() -> None:
    registry = Registry(transport=Any, store=Any, keys=Keys())  # type: ignore[arg-type]
    online = p.StatusOnline(replica="real-1", kind="echo")
    registry.apply(make(T.STATUS_ONLINE, online, from_agent="a"))
    for i in range(2_000):
        name = f"ghost-{i}" + "x" * (200 if i % 2 else 0)
        offline = make(T.STATUS_OFFLINE, p.StatusOffline(replica=name), from_agent="a")
        registry.apply(offline)
    replicas = registry.agents["a"].replicas
    assert len(replicas) == REPLICAS_MAX
    assert "real-1" in replicas and replicas["real-1"].online  # an online one is not evicted
    assert max(len(name) for name in replicas) == NAME_CHARS


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_contract_is_taken_only_as_it_reads_back_from_redis(number: bytes) -> None:
    """A label of NaN or infinity was taken, and stored as null: a hub that started again
    read the agent's contract back and it no longer validated, so every look-up of it
    raised, inside engine steps too (a debugger's reassign candidates, a handoff's check):
    a step that raises ends the term, and the next one meets it again. Such a label is a
    bad message now; what is taken reads back as it was."""
    raw = (
        b'{"message_type": "status.online", "from_agent": "mallory", "payload": '
        b'{"replica": "r1", "contract": {"labels": {"load": %s}}}}' % number
    )
    with pytest.raises(DecodeError, match="labels"):
        decode(raw)
    registry = Registry(transport=Any, store=Any, keys=Keys())  # type: ignore[arg-type]
    labels = {"gpu": True, "mem_gb": 16, "load": 0.5, "zone": "eu"}
    online = p.StatusOnline(replica="r1", contract=Contract(labels=labels))
    registry.apply(make(T.STATUS_ONLINE, online, from_agent="mallory"))
    stored = registry.agents["mallory"].model_dump_json()  # as hub.store.agents saves it
    registry.agents = {"mallory": AgentRecord.model_validate_json(stored)}
    assert registry.contract_of("mallory") == online.contract


@pytest.mark.parametrize("field", ["requires", "provides", "handoff_to"])
def test_a_contract_lists_a_bounded_number_of_keys(field: str) -> None:
    """Every cue whose `target` is resolved scans the lists of every online agent, and each
    `status.online` resolves again every cue waiting for one: one agent listing 12,000
    capabilities took 775 ms of the engine's step per `status.online` it sent, with 200
    cues waiting for `filter: "review in provides"` (15 ms at 256). A contract past
    CONTRACT_ITEMS_MAX keys in a list is a bad message."""
    keys = [f"k{i:05d}" for i in range(CONTRACT_ITEMS_MAX + 1)]

    def online(items: list[str]) -> bytes:
        contract = {field: items}
        body = {"replica": "r1", "contract": contract}
        return json.dumps({"message_type": "status.online", "payload": body}).encode()

    with pytest.raises(DecodeError, match=field):
        decode(online(keys))
    assert getattr(decode(online(keys[1:])).payload.contract, field) == tuple(keys[1:])


def test_a_contract_card_is_made_whatever_numbers_its_labels_hold() -> None:
    """A label of 10**400 was taken, and the agent's A2A card (GET /v1/agents/{agent}/card)
    raised OverflowError making it: a 500. Label ints are 64-bit now (a bad message past
    that); the card holds the largest."""
    with pytest.raises(DecodeError, match="labels"):
        decode(b'{"message_type": "status.online", "payload": {"replica": "r1", '
               b'"contract": {"labels": {"big": 1%s}}}}' % (b"0" * 400))  # fmt: skip
    record = AgentRecord(agent="m", first_seen=1.0)
    record.contract = Contract(labels={"big": 2**63 - 1, "small": -(2**63)}).model_dump()
    card = MessageToDict(contract_card(record, "http://hub/", secured=False))
    (extension,) = card["capabilities"]["extensions"]
    assert extension["params"]["labels"] == {"big": float(2**63 - 1), "small": -float(2**63)}


def test_each_agent_is_made_a_candidate_once_per_contract_it_says() -> None:
    """What targeting sees of an agent is made when it says `status.online`, not each time
    the router asks (a flood of them with 100 agents of 300 keys cost 3.8 ms a batch): the
    same agents come back the same, a new contract is seen at once, and an agent whose
    replicas all went offline is not among them."""
    registry = Registry(transport=Any, store=Any, keys=Keys())  # type: ignore[arg-type]

    def online(agent: str, provides: list[str]) -> None:
        said = p.StatusOnline(replica="r1", kind="echo", contract=Contract(provides=provides))
        registry.apply(make(T.STATUS_ONLINE, said, from_agent=agent))

    online("a", ["review"])
    online("b", ["build"])
    first = registry.online()
    assert first["a"].provides == ("review",) and first["b"].provides == ("build",)
    again = registry.online()
    assert again == first and again["a"] is first["a"] and again["b"] is first["b"]
    online("a", ["review", "tests"])
    changed = registry.online()
    assert changed["a"].provides == ("review", "tests") and changed["b"] is first["b"]
    registry.apply(make(T.STATUS_OFFLINE, p.StatusOffline(replica="r1"), from_agent="b"))
    assert list(registry.online()) == ["a"]
