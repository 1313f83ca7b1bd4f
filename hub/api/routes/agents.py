"""GET /v1/agents: the registry: contracts, replicas, liveness (from consumer-group idle times)."""

from __future__ import annotations

from fastapi import APIRouter

from hub.api.deps import AgentsDep
from hub.api.schemas import AgentPublic, AgentsPublic, ReplicaPublic, ts

router = APIRouter(prefix="/agents", tags=["agents"])


@router.get("", response_model=AgentsPublic)
async def list_agents(agents: AgentsDep) -> AgentsPublic:
    data = [
        AgentPublic(
            agent=a["agent"],
            kind=a["kind"],
            contract=a["contract"],
            online=a["online"],
            last_seen=ts(a["last_seen"]),
            consumers=a["consumers"],
            liveness_read=a["liveness_read"],
            replicas=[
                ReplicaPublic(
                    replica=r["replica"],
                    online=r["online"],
                    idle_ms=r["idle_ms"],
                    pending=r["pending"],
                    last_seen=ts(r["last_seen"]),
                )
                for r in a["replicas"]
            ],
        )
        for a in await agents.describe()
    ]
    return AgentsPublic(data=data, count=len(data))
