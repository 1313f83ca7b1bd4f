"""Agent Cards: callboard's own (its skills are the stored cuelists, skill id = cuelist name),
and each registered specialist's contract exported as one (skills from `provides`, the
inputs from `requires`)."""

from __future__ import annotations

from typing import Any

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from hub.store.agents import AgentRecord
from hub.store.cuelists import CuelistStore
from protocols.contracts import Contract

A2A_PATH = "/a2a"  # the HTTP+JSON binding; JSON-RPC at A2A_PATH + RPC_PATH
RPC_PATH = "/jsonrpc"
MODES = ["text/plain", "application/json"]
BEARER = "bearer"
CONTRACT_EXTENSION = "urn:callboard:contract:v1"  # the whole contract, for tools that read it
CALLBOARD_BINDING = "callboard"  # a specialist is reached through callboard's cuelists


def _security(secured: bool) -> dict[str, Any]:
    if not secured:
        return {}
    scheme = HTTPAuthSecurityScheme(
        scheme="Bearer", description="the hub's CALLBOARD_API_KEY, as for its REST API"
    )
    return {
        "security_schemes": {BEARER: SecurityScheme(http_auth_security_scheme=scheme)},
        "security_requirements": [SecurityRequirement(schemes={BEARER: StringList()})],
    }


async def hub_card(cuelists: CuelistStore, base_url: str, *, secured: bool) -> AgentCard:
    """callboard's card: one skill per stored cuelist (its latest version's description)."""
    skills = []
    for name in await cuelists.names():
        version = await cuelists.latest(name)
        if version is None:
            continue
        cuelist = await cuelists.get(name, version)
        cues = ", ".join(c.id for c in cuelist.cues[:20])
        skills.append(
            AgentSkill(
                id=name, name=name, tags=["cuelist"],
                description=cuelist.description or f"runs the cuelist {name} ({cues})",
                examples=[f'{{"skill": "{name}"}} in the message metadata'],
                input_modes=MODES, output_modes=MODES,
            )
        )  # fmt: skip
    base = base_url.rstrip("/")
    return AgentCard(
        name="callboard",
        description=(
            "A hub that runs cuelists of specialist agents (WARNING, STANDBY, GO). Each skill "
            "is a cuelist: a message with metadata {\"skill\": NAME} (or a data part "
            "{\"cuelist\": NAME}) starts a run, whose id is the task id. A run that waits for "
            "an approval or a manual GO is input-required: reply with the condition or the cue."
        ),
        version="1",
        supported_interfaces=[
            AgentInterface(url=f"{base}{A2A_PATH}", protocol_binding=TransportProtocol.HTTP_JSON,
                           protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=f"{base}{A2A_PATH}{RPC_PATH}",
                           protocol_binding=TransportProtocol.JSONRPC,
                           protocol_version=PROTOCOL_VERSION_1_0),
        ],
        provider=AgentProvider(organization="callboard", url=base),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES, default_output_modes=MODES, skills=skills,
        **_security(secured),
    )  # fmt: skip


def contract_card(record: AgentRecord, base_url: str, *, secured: bool) -> AgentCard:
    """A registered specialist's contract as an Agent Card: a skill per key it provides, each
    naming the keys it requires; the contract itself in an extension's params. The agent is
    reached through callboard (its interface says so), not called directly."""
    contract = Contract.model_validate(record.contract)
    needs = ", ".join(contract.requires) or "nothing"
    what = (
        contract.description or f"callboard specialist {record.agent} ({record.kind or 'custom'})"
    )
    skills = [
        AgentSkill(
            id=key, name=key, description=f"provides {key}; requires {needs}",
            tags=["provides", *(f"requires:{r}" for r in contract.requires)],
            input_modes=["application/json"], output_modes=["application/json"],
        )
        for key in contract.provides
    ] or [
        AgentSkill(id=record.agent, name=record.agent, description=f"{what}; requires {needs}",
                   tags=["agent", *(f"requires:{r}" for r in contract.requires)])
    ]  # fmt: skip
    extension = AgentExtension(
        uri=CONTRACT_EXTENSION, description="the callboard contract of this agent",
        params=contract.model_dump(mode="json"),
    )  # fmt: skip
    base = base_url.rstrip("/")
    return AgentCard(
        name=record.agent, description=what, version="1",
        supported_interfaces=[
            AgentInterface(url=f"{base}/v1/agents/{record.agent}",
                           protocol_binding=CALLBOARD_BINDING, protocol_version="1"),
        ],
        provider=AgentProvider(organization="callboard", url=base),
        capabilities=AgentCapabilities(extensions=[extension]),
        default_input_modes=["application/json"], default_output_modes=["application/json"],
        skills=skills, **_security(secured),
    )  # fmt: skip
