"""The live wiring map (`GET /v1/wiring`) as a picture: the hub on the left, every agent in a column
to its right joined to it by the streams it reads and writes, and handoffs between agents
drawn as dashed arcs on the far side, labelled with the context keys they carry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HUB_W, HUB_H = 120, 56
AGENT_W, AGENT_H = 190, 44
ROW = 64
COL_X = 300
PAD = 20
ARC = 60  # how far a handoff arc bulges right of the agents


@dataclass(frozen=True, slots=True)
class AgentBox:
    agent: str
    x: int
    y: int
    online: bool
    registered: bool
    cues: int


@dataclass(frozen=True, slots=True)
class Link:
    path: str
    kind: str  # "stream" (hub <-> agent) or "handoff"
    label: str
    label_x: int
    label_y: int
    title: str


@dataclass(frozen=True, slots=True)
class WiringPicture:
    hub_y: int
    agents: tuple[AgentBox, ...]
    links: tuple[Link, ...]
    width: int
    height: int


def picture(wiring: dict[str, Any]) -> WiringPicture:
    agents = wiring["agents"]
    rows = max(1, len(agents))
    height = 2 * PAD + rows * ROW
    hub_y = height // 2 - HUB_H // 2
    boxes: dict[str, AgentBox] = {}
    for i, a in enumerate(agents):
        boxes[a["agent"]] = AgentBox(
            a["agent"], COL_X, PAD + i * ROW, bool(a["online"]), bool(a["registered"]),
            len(a["cues"]),
        )  # fmt: skip
    links: list[Link] = []
    hx, hy = PAD + HUB_W, hub_y + HUB_H // 2
    for box in boxes.values():
        ay = box.y + AGENT_H // 2
        mid = (hx + COL_X) // 2
        links.append(Link(
            f"M{hx},{hy} C{mid},{hy} {mid},{ay} {COL_X},{ay}", "stream", "", 0, 0,
            f"hub and {box.agent}: the hub writes its inbox, it writes its out stream",
        ))  # fmt: skip
    right = COL_X + AGENT_W
    handoffs = [e for e in wiring["edges"] if e["kind"] == "handoff"]
    seen: set[tuple[str, str]] = set()
    for n, edge in enumerate(handoffs):
        pair = (edge["from"], edge["to"])
        a, b = boxes.get(pair[0]), boxes.get(pair[1])
        if a is None or b is None or pair in seen:
            continue
        seen.add(pair)
        y1, y2 = a.y + AGENT_H // 2, b.y + AGENT_H // 2
        bulge = right + ARC + (n % 3) * 24
        keys = ", ".join(edge.get("context_keys") or []) or "handoff"
        links.append(Link(
            f"M{right},{y1} C{bulge},{y1} {bulge},{y2} {right},{y2}", "handoff", keys,
            bulge - 18, (y1 + y2) // 2, f"{pair[0]} hands off to {pair[1]} ({edge.get('via')})",
        ))  # fmt: skip
    width = right + ARC + 3 * 24 + 200
    return WiringPicture(hub_y, tuple(boxes.values()), tuple(links), width, height)
