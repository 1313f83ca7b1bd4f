"""The `mcp` specialist: runs a cue's tool call on an MCP server, through the official `mcp`
SDK's client, and records the tool's result as the cue's result.

Action: `{server?, tool, arguments?}`. `server` is a streamable HTTP URL
(`http://host:port/mcp`) or a command that speaks MCP on stdin/stdout (a list, or a string
split like a shell would, without a shell); a replica started with `--url` serves one
server and needs none. WARNING lists the server's tools (every page of the list, up to
`PAGES_MAX` pages and `TOOLS_MAX` tools) and checks `tool` is one of them (not ready,
saying why, otherwise). GO calls it once: the result (`structured` content and
the content blocks) is the cue's result, and `{cue}.result` in the run's context; a tool
error fails the cue with its text. A GO redelivered after a replica died mid-call is not
called again (a tool call need not be idempotent): the cue fails, saying so, and a retry
makes a new attempt.

Every server is untrusted: an answer past one message (`max_message_bytes`) is not read
further and fails what asked for it, saying so. Over HTTP a JSON answer is counted as it
unpacks (a gzip bomb too, `mcp_http.py`) and a server-sent event is bounded by the SDK at
that size; a stdio server's lines pass a guard process (`mcp_guard.py`) that cuts a longer one.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import AudioContent, CallToolResult, ImageContent
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from specialists.base import Readiness, Specialist
from specialists.builtin.mcp_http import http_client
from specialists.cue import Cue, Entry, Result
from specialists.errors import Reject

CALL = "mcp-call"  # the done-marker set while a cue's tool call is under way
GUARD = Path(__file__).with_name("mcp_guard.py")  # between a stdio server and the SDK
PAGES_MAX = 100  # pages of a tool list read (each one message at most)
TOOLS_MAX = 10_000  # tool names kept of a server
NAMED_MAX = 50  # tool names a "no such tool" reason lists


class McpSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_MCP_", extra="ignore")

    url: str | None = None  # the server a replica serves when the action names none (--url)
    token: SecretStr | None = None  # bearer token for every HTTP server...
    tokens: dict[str, SecretStr] = {}  # ...or per server URL (JSON in the env)
    timeout_s: float = 300.0  # a tool call's read timeout
    tools_ttl_s: float = 60.0  # how long a server's tool list is trusted


class ToolFailed(Exception):
    """The tool answered with an error."""


class ToolListTooLong(Exception):
    """The server's tool list went on past `PAGES_MAX` pages or `TOOLS_MAX` tools."""


class Mcp(Specialist):
    kind = "mcp"
    takes_url: ClassVar[bool] = True

    def __init__(
        self, *args: Any, url: str | None = None, mcp_settings: McpSettings | None = None,
        **kw: Any,
    ) -> None:  # fmt: skip
        super().__init__(*args, **kw)
        self.mcp_settings = mcp_settings or McpSettings()
        self.url = url or self.mcp_settings.url
        self.tools: dict[str, tuple[float, list[str]]] = {}  # server -> (when, tool names)

    def server(self, action: dict[str, Any]) -> str | list[str]:
        server = action.get("server") or self.url
        if isinstance(server, str) and server.startswith(("http://", "https://")):
            return server
        argv = shlex.split(server) if isinstance(server, str) else server
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise Reject(
                "action.server must be an MCP URL (http://.../mcp) or a command (a list or a "
                f"string), or the replica started with --url (got {server!r})"
            )
        return argv

    @asynccontextmanager
    async def connect(self, server: str | list[str]) -> AsyncIterator[Client]:
        try:
            async with self._connect(server) as client:
                yield client
        except BaseExceptionGroup as group:  # the transport's task group wraps what failed
            raise _alone(group) from None

    @asynccontextmanager
    async def _connect(self, server: str | list[str]) -> AsyncIterator[Client]:
        conf, limit_bytes = self.mcp_settings, self.settings.max_message_bytes
        if isinstance(server, list):  # the SDK reads a line whole: the guard bounds it
            guarded = ["-I", str(GUARD), str(limit_bytes), *server]
            params = StdioServerParameters(command=sys.executable, args=guarded)
            async with Client(params, read_timeout_seconds=conf.timeout_s) as client:
                yield client
            return
        secret = conf.tokens.get(server) or conf.token
        headers = {"Authorization": f"Bearer {secret.get_secret_value()}"} if secret else None
        http = http_client(headers, limit_bytes)
        transport = streamable_http_client(server, http_client=http,
                                           max_sse_event_size=limit_bytes)  # fmt: skip
        async with http, Client(transport, read_timeout_seconds=conf.timeout_s) as client:
            yield client

    async def _check_tool(self, cue: Cue, *, fresh: bool) -> str | list[str]:
        server = self.server(cue.action)
        tool = cue.action.get("tool")
        if not isinstance(tool, str) or not tool:
            raise Reject("action.tool must name the tool to call")
        key = server if isinstance(server, str) else shlex.join(server)
        known = self.tools.get(key)
        if fresh or known is None or time.monotonic() - known[0] > self.mcp_settings.tools_ttl_s:
            async with self.connect(server) as client:
                names = await _tool_names(client, key)
            known = self.tools[key] = (time.monotonic(), names)
        if tool not in known[1]:
            have = ", ".join(known[1][:NAMED_MAX]) or "none"
            if len(known[1]) > NAMED_MAX:
                have += f" and {len(known[1]) - NAMED_MAX} more"
            raise LookupError(f"{key} has no tool {tool!r} (it has: {have})")
        return server

    async def prepare(self, cue: Cue) -> None:
        await self._check_tool(cue, fresh=True)

    async def ready(self, cue: Cue) -> Readiness:
        try:
            await self._check_tool(cue, fresh=False)
        except Exception as exc:  # unreachable, refused, no such tool: say why
            return False, f"{type(exc).__name__}: {exc}"
        return True

    async def execute(self, cue: Cue) -> Result:
        server = await self._check_tool(cue, fresh=False)
        arguments = cue.action.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise Reject("action.arguments must be a mapping")
        async with cue.once(CALL) as first:
            if not first:
                raise ToolFailed(
                    "a replica started this tool call and did not finish it; it is not called "
                    "twice (retry the cue for a new attempt)"
                )
            async with self.connect(server) as client:
                answer = await client.call_tool(str(cue.action["tool"]), arguments)
        return self._result(cue, answer)

    def _result(self, cue: Cue, answer: CallToolResult) -> Result:
        content = [_block(c) for c in answer.content]
        texts = [c["text"] for c in content if c.get("type") == "text"]
        if answer.is_error:
            raise ToolFailed("; ".join(texts) or "the tool reported an error")
        value = answer.structured_content if answer.structured_content is not None else texts
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        result = {"tool": cue.action["tool"], "structured": answer.structured_content,
                  "content": content}  # fmt: skip
        entry = Entry(value, tags=["mcp"], metadata={"tool": cue.action["tool"]})
        return Result(result=result, context={f"{cue.cue_id}.result": entry})


async def _tool_names(client: Client, server: str) -> list[str]:
    """The names of the server's tools, page after page as its `nextCursor` says, up to
    `PAGES_MAX` pages and `TOOLS_MAX` tools: a server may page without end."""
    names: list[str] = []
    cursor: str | None = None
    for _ in range(PAGES_MAX):
        page = await client.list_tools(cursor=cursor)
        names.extend(tool.name for tool in page.tools)
        if len(names) > TOOLS_MAX:
            raise ToolListTooLong(f"{server} lists over {TOOLS_MAX} tools: not read further")
        cursor = page.next_cursor
        if not cursor:
            return names
    raise ToolListTooLong(f"{server} lists its tools on over {PAGES_MAX} pages: not read further")


def _alone(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error a group holds (so a cue's reason names it), else the group."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup) and len(found.exceptions) == 1:
        found = found.exceptions[0]
    return found


def _block(block: Any) -> dict[str, Any]:
    """A content block as JSON; an image's or a sound's bytes stay out (their size stays)."""
    data: dict[str, Any] = block.model_dump(mode="json", exclude_none=True, by_alias=True)
    if isinstance(block, ImageContent | AudioContent):
        data["size"] = len(data.pop("data", ""))
    return data
