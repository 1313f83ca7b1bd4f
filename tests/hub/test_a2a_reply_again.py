"""An A2A client's reply sent again after an error whose outcome it could not know: done
once, answered as the first. The official SDK's client, over JSON-RPC, against the API of
a hub that leads nothing (so a command waits for a leader, as in a failover) in front of a
real leading hub, on a real server."""

from __future__ import annotations

import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers import new_data_part, new_text_part
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import A2AError, InvalidParamsError

from hub.service import Hub
from protocols.keys import Keys
from protocols.settings import Settings
from tests.helpers import eventually
from tests.hub.armed import armed_run, sent_to_agent
from tests.hub.running import api_process, running_hub

pytestmark = pytest.mark.redis


async def _client(api: httpx.AsyncClient) -> Client:
    card = await A2ACardResolver(api, "http://127.0.0.1").get_agent_card()
    config = ClientConfig(
        httpx_client=api, streaming=False, supported_protocol_bindings=["JSONRPC"]
    )
    return ClientFactory(config).create(card)


def _reply(run_id: str, part: Part, message_id: str | None = None) -> SendMessageRequest:
    message = Message(
        role=Role.ROLE_USER, message_id=message_id or str(uuid.uuid4()), task_id=run_id,
        parts=[part],
    )  # fmt: skip
    config = SendMessageConfiguration(return_immediately=True)
    return SendMessageRequest(message=message, configuration=config)


async def _send(client: Client, request: SendMessageRequest) -> TaskState:
    [answer] = [event async for event in client.send_message(request)]
    return answer.task.status.state


async def _warned(hub: Hub, run_id: str) -> bool:
    run = await hub.store.run(run_id)
    return run is not None and run.cues["FIRST"].state.value == "warning"


@pytest.mark.parametrize("part", ["text", "data"])
async def test_a_reply_sent_again_after_a_503_is_done_once_and_answered(
    settings: Settings, keys: Keys, part: str
) -> None:
    """The reply ("approve", or `{go: FIRST}`) fires FIRST's GO; no hub leads, so the GO
    is queued and the client gets an error. A leader comes and serves it. The client sends
    the same message again: answered without error (before, the GO went again and was
    refused as "not armed: it is warning", or "approve" found nothing left to approve),
    and one WARNING went to the cue's agent."""
    async with running_hub(settings, lease_ms=1500) as hub:
        run_id = await armed_run(hub)
    body = new_text_part("approve") if part == "text" else new_data_part({"go": "FIRST"})
    reply = _reply(run_id, body)
    async with api_process(settings, command_timeout_s=0.5) as api:
        client = await _client(api)
        with pytest.raises(A2AError):
            await _send(client, reply)
        async with running_hub(settings, lease_ms=1500) as hub:
            await eventually(lambda: _warned(hub, run_id), 10, message="the queued GO served")
            assert await _send(client, reply) == TaskState.TASK_STATE_WORKING
            assert await sent_to_agent(hub, keys) == 1
            run = await hub.store.run(run_id)
            assert run is not None and run.cues["FIRST"].attempt == 1
            # a new message asking for the same GO is the client's new request: refused
            with pytest.raises(InvalidParamsError, match=r"not armed|waits for"):
                await _send(client, _reply(run_id, body))


async def test_a_message_id_used_for_another_reply_is_refused(
    settings: Settings, keys: Keys
) -> None:
    async with running_hub(settings, lease_ms=1500) as hub, api_process(settings) as api:
        run_id = await armed_run(hub)
        client = await _client(api)
        first = _reply(run_id, new_data_part({"go": "FIRST"}), message_id="m-1")
        assert await _send(client, first) == TaskState.TASK_STATE_WORKING
        await eventually(lambda: _warned(hub, run_id), 10, message="the GO served")
        other = _reply(run_id, new_data_part({"go": "SECOND"}), message_id="m-1")
        with pytest.raises(InvalidParamsError, match="used for another message"):
            await _send(client, other)
        assert await sent_to_agent(hub, keys) == 1
