"""A small MCP server built with the official `mcp` SDK, for the `mcp` specialist's example
(cuelists/interop/mcp-tools.yaml) and tests: over streamable HTTP
(`python examples/mcp_server.py --port P [--token T]`, at http://127.0.0.1:P/mcp) or over
stdio (`python examples/mcp_server.py --stdio`).

Tools: `add(a, b)` (structured: {result}), `shout(text)` (text), `broken()` (a tool error),
`slow(seconds)`, `calls()` (how many calls this process answered, by tool).
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

CALLS: Counter[str] = Counter()
server: MCPServer = MCPServer("test-tools", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    CALLS["add"] += 1
    return a + b


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    CALLS["shout"] += 1
    return text.upper() + "!"


@server.tool()
def broken() -> str:
    """Always fails."""
    CALLS["broken"] += 1
    raise ToolError("the printer is on fire")


@server.tool()
async def slow(seconds: float) -> str:
    """Takes its time."""
    CALLS["slow"] += 1
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def calls() -> dict[str, int]:
    """How many calls each tool answered."""
    return dict(CALLS)


class RequireToken:
    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token and scope["type"] == "http":
            got = dict(scope["headers"]).get(b"authorization", b"").decode()
            if got != f"Bearer {self.token}":
                await JSONResponse({"detail": "bad token"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int)
    parser.add_argument("--token")
    parser.add_argument("--stdio", action="store_true")
    args = parser.parse_args()
    if args.stdio:
        server.run("stdio")
        return
    app = RequireToken(server.streamable_http_app(), args.token)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
