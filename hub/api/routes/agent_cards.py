"""GET /v1/agents/{agent}/card: a registered specialist's contract as an A2A Agent Card."""

from __future__ import annotations

from typing import Annotated, Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from fastapi import APIRouter, Path, Request

from hub.a2a.card import contract_card
from hub.api.deps import HubDep
from hub.api.schemas import ErrorPublic
from protocols.errors import NotFound

router = APIRouter(prefix="/agents", tags=["agents"])


@router.get("/{agent}/card", responses={404: {"model": ErrorPublic}})
async def agent_card(
    hub: HubDep, request: Request, agent: Annotated[str, Path(min_length=1, max_length=64)]
) -> dict[str, Any]:
    """The agent's contract as an Agent Card: a skill per key it `provides`, each naming the
    keys it `requires`, and the whole contract in the `urn:callboard:contract:v1` extension."""
    record = (await hub.stores.agents.load()).get(agent)
    if record is None:
        raise NotFound(f"no agent {agent} has registered")
    card = contract_card(record, str(request.base_url), secured=bool(hub.settings.api_key))
    return agent_card_to_dict(card)
