"""A small A2A agent built with the official `a2a-sdk` server, for the `a2a` specialist's
example (cuelists/interop/a2a-summarize.yaml) and tests:
`python examples/a2a_agent.py --port P [--no-streaming] [--token T]`.

Skills (picked by the message metadata `skill`):
- `summarize`: completes at once with a text artifact `summary` and a data artifact `stats`;
- `ask`: asks "Which colour?" (INPUT_REQUIRED); the answer completes it (artifact `answer`);
- `slow`: works for `data.seconds` (default 60) unless cancelled;
- `fail`: fails with a reason.
`GET /log` lists every message it received and every task it cancelled, so a test can
check that something was sent once.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import uvicorn
from a2a.helpers import (
    get_data_parts,
    get_message_text,
    new_data_part,
    new_task_from_user_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    TaskState,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

PUBLIC = ("/.well-known/agent-card.json", "/log")  # the test reads /log without a token
LOG: dict[str, list[dict[str, Any]]] = {"messages": [], "cancelled": []}
SKILLS = {
    "summarize": "Summarizes the text it is sent",
    "ask": "Asks which colour, then answers with it",
    "slow": "Works for data.seconds unless cancelled",
    "fail": "Always fails",
}


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        LOG["messages"].append(
            {
                "message_id": message.message_id,
                "task_id": context.task_id,
                "context_id": context.context_id,
                "text": get_message_text(message),
                "skill": dict(message.metadata).get("skill"),
            }
        )
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(message)
            await queue.enqueue_event(task)
        up = TaskUpdater(queue, task.id, task.context_id)
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            colour = get_message_text(message)
            await up.add_artifact([new_text_part(f"the colour is {colour}")], name="answer")
            await up.complete(up.new_agent_message([new_text_part("thanks")]))
            return
        skill = dict(task.history[0].metadata).get("skill") if task.history else None
        await up.start_work()
        if skill == "ask":
            await up.requires_input(up.new_agent_message([new_text_part("Which colour?")]))
        elif skill == "slow":
            data = get_data_parts(list(message.parts))
            seconds = float(data[0].get("seconds", 60)) if data else 60.0
            await asyncio.sleep(seconds)
            await up.complete()
        elif skill == "fail":
            await up.failed(up.new_agent_message([new_text_part("the disk is full")]))
        else:
            text = get_message_text(message)
            await up.add_artifact([new_text_part(text.upper())], name="summary")
            stats = {"words": len(text.split()), "chars": len(text)}
            await up.add_artifact([new_data_part(stats)], name="stats")
            await up.complete()

    async def cancel(self, context: RequestContext, queue: EventQueue) -> None:
        LOG["cancelled"].append({"task_id": context.task_id})
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(queue, context.task_id, context.context_id).cancel()


class RequireToken:
    """Bearer auth for everything but the card (A2A cards are public; the card says how)
    and the test log."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token and scope["type"] == "http" and scope["path"] not in PUBLIC:
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"").decode() != f"Bearer {self.token}":
                await JSONResponse({"detail": "bad token"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def card(url: str, streaming: bool, token: str | None) -> AgentCard:
    security: dict[str, Any] = {}
    if token:
        scheme = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        security = {
            "security_schemes": {"bearer": scheme},
            "security_requirements": [SecurityRequirement(schemes={"bearer": StringList()})],
        }
    return AgentCard(
        name="test-agent", description="an A2A agent for callboard's tests", version="1",
        supported_interfaces=[
            AgentInterface(url=f"{url}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"),
            AgentInterface(url=f"{url}/rpc", protocol_binding="JSONRPC", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id=k, name=k, description=v, tags=["test"]) for k, v in SKILLS.items()],
        **security,
    )  # fmt: skip


def app(port: int, streaming: bool, token: str | None) -> ASGIApp:
    agent_card = card(f"http://127.0.0.1:{port}", streaming, token)
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=agent_card
    )

    async def log(request: Request) -> Response:
        return JSONResponse(LOG)

    routes: list[BaseRoute] = [
        *create_agent_card_routes(agent_card),
        Route("/log", log),
        Mount("/rest", routes=create_rest_routes(handler)),
        *create_jsonrpc_routes(handler, rpc_url="/rpc"),
    ]
    return RequireToken(Starlette(routes=routes), token)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--no-streaming", action="store_true")
    parser.add_argument("--token")
    args = parser.parse_args()
    asgi = app(args.port, not args.no_streaming, args.token)
    uvicorn.run(asgi, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
