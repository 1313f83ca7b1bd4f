"""The `mcp` specialist reads a server's whole tool list, page after page as `nextCursor`
says, against the official `mcp` SDK's low-level server over stdio; a server that pages
without end is read up to `PAGES_MAX` pages or `TOOLS_MAX` tools, and the cue is not ready,
saying so."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import sys

import pytest

from protocols.messages import MessageType
from specialists.builtin.mcp import PAGES_MAX, TOOLS_MAX, Mcp
from tests.specialists.conftest import HubSide, Starter

pytestmark = pytest.mark.redis

M = MessageType

# argv[1] picks how the list pages: `two` (`first`, then `second` on page 2), `endless`
# (one tool a page, a next cursor always) or `crowded` (4,000 tools a page, without end)
PAGED_SERVER = r"""
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

MODE = sys.argv[1]


def tool(name):
    return types.Tool(name=name, input_schema={"type": "object"})


async def list_tools(ctx, params):
    page = int(params.cursor) if params is not None and params.cursor else 0
    if MODE == "two":
        names, more = [["first"], ["second"]][page], page == 0
    elif MODE == "endless":
        names, more = [f"tool{page}"], True
    else:
        names, more = [f"p{page}t{i}" for i in range(4000)], True
    return types.ListToolsResult(tools=[tool(n) for n in names],
                                 next_cursor=str(page + 1) if more else None)


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text",
                                                           text=f"called {params.name}")])


server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


def _server(mode: str) -> list[str]:
    return [sys.executable, "-c", PAGED_SERVER, mode]


async def test_a_tool_on_the_second_page_is_found_and_called(start: Starter, hub: HubSide) -> None:
    """The server lists `first`, then `second` on page 2: `second` is ready and called. On
    the code before, only page 1 was read: `second` was not ready ("has no tool 'second'
    (it has: first)") and its GO failed."""
    await start(Mcp)
    await hub.warning("CUE-1", server=_server("two"), tool="second")
    await hub.standby("CUE-1")
    [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1", timeout_s=30)
    assert ack.payload.ready, ack.payload.reason
    await hub.go("CUE-1", server=_server("two"), tool="second")
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1", timeout_s=30)
    assert done.payload.result["content"] == [{"type": "text", "text": "called second"}]


async def test_a_list_paged_without_end_stops_at_the_page_cap(start: Starter, hub: HubSide) -> None:
    """A next cursor on every page: the list is read up to `PAGES_MAX` pages, then the cue
    is not ready, saying so, and the replica serves the next cue. Once cursors are
    followed, nothing else would stop it."""
    await start(Mcp)
    await hub.warning("CUE-1", server=_server("endless"), tool="nowhere")
    await hub.standby("CUE-1")
    [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1", timeout_s=60)
    assert not ack.payload.ready
    assert f"lists its tools on over {PAGES_MAX} pages: not read further" in ack.payload.reason
    assert "ToolListTooLong: " in ack.payload.reason
    await hub.go("CUE-2", server=_server("two"), tool="first")
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-2", timeout_s=30)
    assert done.payload.result["content"] == [{"type": "text", "text": "called first"}]


async def test_a_list_of_too_many_tools_stops_at_the_tool_cap(start: Starter, hub: HubSide) -> None:
    """Pages of 4,000 tools each (under one message apiece), without end: reading stops
    once more than `TOOLS_MAX` names are held, well before the page cap."""
    await start(Mcp)
    await hub.warning("CUE-1", server=_server("crowded"), tool="nowhere")
    await hub.standby("CUE-1")
    [ack] = await hub.wait(M.ACK_STANDBY, "CUE-1", timeout_s=60)
    assert not ack.payload.ready
    assert f"lists over {TOOLS_MAX} tools: not read further" in ack.payload.reason
