"""The live wiring map: who sends and reads which message types and context keys.

Built from protocols.messages (what specialists and the hub may send), the registry's agents
and contracts, and the stored cuelists' targets, inline contracts and handoffs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from protocols.messages import HUB, HUB_SENDS, SPECIALIST_SENDS, Channel, MessageType

OPERATORS = "operators"


@dataclass
class AgentWiring:
    agent: str
    online: bool = False
    registered: bool = False
    requires: set[str] = field(default_factory=set)
    provides: set[str] = field(default_factory=set)
    handoff_to: set[str] = field(default_factory=set)
    cues: list[str] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "online": self.online,
            "registered": self.registered,
            "requires": sorted(self.requires),
            "provides": sorted(self.provides),
            "handoff_to": sorted(self.handoff_to),
            "cues": self.cues,
        }


def _readers(mt: MessageType, agents: list[str], targeted: list[str]) -> list[str]:
    if mt in SPECIALIST_SENDS and mt is not MessageType.TASK_HANDOFF:
        return [HUB]
    if mt is MessageType.TASK_HANDOFF:
        return [HUB, *targeted]
    if mt.channel is Channel.BROADCAST:
        return agents
    if mt.channel is Channel.ESCALATION:
        return [OPERATORS]
    return targeted


def build(registry: list[dict[str, Any]], cuelists: list[dict[str, Any]]) -> dict[str, Any]:
    """The map from the registry's agents and the latest version of each stored cuelist."""
    agents: dict[str, AgentWiring] = {}

    def agent(name: str) -> AgentWiring:
        return agents.setdefault(name, AgentWiring(name))

    for entry in registry:
        a = agent(entry["agent"])
        a.online, a.registered = bool(entry.get("online")), True
        _contract(a, entry.get("contract") or {})
    handoffs: dict[tuple[str, str], set[str]] = {}  # (sender, receiver) -> where declared
    for doc in cuelists:
        name = doc.get("cuelist", "?")
        for agent_id, contract in (doc.get("specialists") or {}).items():
            _contract(agent(agent_id), contract or {})
        for cue in doc.get("cues") or []:
            targets = list(cue.get("target_agents") or [])
            for t in targets:
                agent(t).cues.append(f"{name}/{cue.get('id')}")
            to = (cue.get("handoff") or {}).get("to")
            if to:
                agent(to)
                for t in targets:
                    handoffs.setdefault((t, to), set()).add(f"{name}/{cue.get('id')}")
    for a in list(agents.values()):
        for to in a.handoff_to:
            handoffs.setdefault((a.agent, to), set()).add("contract")
            agent(to)
    names = sorted(agents)
    targeted = sorted(a.agent for a in agents.values() if a.cues) or names
    types = [
        {
            "type": mt.value,
            "channel": mt.channel.value,
            "senders": names if mt in SPECIALIST_SENDS else [HUB],
            "readers": _readers(mt, names, targeted),
        }
        for mt in MessageType
        if mt in SPECIALIST_SENDS or mt in HUB_SENDS
    ]
    keys: dict[str, dict[str, set[str]]] = {}
    for a in agents.values():
        for k in a.provides:
            keys.setdefault(k, {"provided_by": set(), "required_by": set()})["provided_by"].add(
                a.agent
            )
        for k in a.requires:
            keys.setdefault(k, {"provided_by": set(), "required_by": set()})["required_by"].add(
                a.agent
            )
    context_keys = [
        {
            "key": k,
            "provided_by": sorted(v["provided_by"]),
            "required_by": sorted(v["required_by"]),
            "unprovided": not v["provided_by"],
        }
        for k, v in sorted(keys.items())
    ]
    edges: list[dict[str, Any]] = []
    for name in names:
        edges.append({"from": name, "to": HUB, "kind": "out", "types": _sends_of(SPECIALIST_SENDS)})
        if agents[name].cues:
            edges.append({"from": HUB, "to": name, "kind": "in", "types": _hub_to_agent()})
    # one edge per pair of agents, however many cues and contracts declare it
    for (sender, receiver), where in sorted(handoffs.items()):
        shared = sorted(agents[sender].provides & agents[receiver].requires)
        edges.append(
            {
                "from": sender,
                "to": receiver,
                "kind": "handoff",
                "via": ", ".join(sorted(where - {"contract"}) + sorted(where & {"contract"})),
                "types": [MessageType.TASK_HANDOFF.value],
                "context_keys": shared,
            }
        )
    return {
        "agents": [agents[n].public() for n in names],
        "message_types": types,
        "context_keys": context_keys,
        "edges": edges,
        "cuelists": sorted(doc.get("cuelist", "?") for doc in cuelists),
    }


def _contract(a: AgentWiring, contract: dict[str, Any]) -> None:
    a.requires.update(contract.get("requires") or [])
    a.provides.update(contract.get("provides") or [])
    a.handoff_to.update(contract.get("handoff_to") or [])


def _sends_of(types: frozenset[MessageType]) -> list[str]:
    return sorted(mt.value for mt in types)


def _hub_to_agent() -> list[str]:
    return sorted(
        mt.value
        for mt in HUB_SENDS
        if mt.channel in (Channel.COORD, Channel.TASK) or mt is MessageType.STATUS_REQUEST
    )


def _node(name: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


def _label(types: list[str]) -> str:
    channels = sorted({t.split(".", 1)[0] for t in types})
    return ", ".join(f"{c}.*" for c in channels)


def mermaid(wiring: dict[str, Any]) -> str:
    """The map as a mermaid flowchart."""
    lines = ["flowchart LR", f"  {_node(HUB)}{{{{{HUB}}}}}"]
    for a in wiring["agents"]:
        style = "" if a["online"] else ":::offline"
        lines.append(f'  {_node(a["agent"])}["{a["agent"]}"]{style}')
    for e in wiring["edges"]:
        src, dst = _node(e["from"]), _node(e["to"])
        if e["kind"] == "handoff":
            keys = ", ".join(e["context_keys"]) or "handoff"
            lines.append(f'  {src} -.->|"handoff: {keys}"| {dst}')
        else:
            lines.append(f'  {src} -->|"{_label(e["types"])}"| {dst}')
    if wiring["agents"]:
        lines.append(f'  {_node(HUB)} -.->|"{Channel.BROADCAST.value}.*"| {_node("all")}(("all"))')
    lines.append("  classDef offline stroke-dasharray: 4 4")
    return "\n".join(lines) + "\n"
