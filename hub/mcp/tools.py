"""The MCP tools an assistant operates callboard with: each one calls the REST route's own
function (same checks, same answers, no second write path) and returns its schema.

A refusal (no such run, a cue not armed, an invalid cuelist name...) is a tool error
(`isError`) carrying the API's `detail`, so the assistant reads why; so are arguments not
as the signature says (`arguments`: taken as JSON sent them, never coerced)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, ParamSpec, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import Field

from hub.api.deps import get_run as load_run
from hub.api.idempotency import KEY_MAX, Asked
from hub.api.offload import off_the_loop_if
from hub.api.routes import budgets as budget_routes
from hub.api.routes import cuelists as cuelist_routes
from hub.api.routes import escalations as escalation_routes
from hub.api.routes import runs as run_routes
from hub.api.schemas import (
    BudgetChange,
    BudgetPublic,
    CancelCreate,
    CancelPublic,
    ConditionPublic,
    CuelistPublic,
    CuelistsPublic,
    EscalationPublic,
    EscalationResolve,
    EscalationsPublic,
    GoPublic,
    RunCreate,
    RunCreated,
    RunPublic,
    RunsPublic,
    ValidationPublic,
)
from hub.mcp.arguments import tool_as_sent
from hub.service import Hub
from protocols import validation
from protocols.errors import CallboardError
from protocols.payloads import AS_JSON_NUMBER

P = ParamSpec("P")
R = TypeVar("R")
RunId = Annotated[str, Field(description="a run id (POST /v1/runs answered it)", max_length=200)]
READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
Key = Annotated[
    str | None,
    Field(
        min_length=1, max_length=KEY_MAX,  # as the REST API's Idempotency-Key header
        description="call again with the same key and arguments (after a timeout, say): "
        "answered as the first call was, and nothing is done twice (the REST API's "
        "Idempotency-Key, kept a day)",
    ),
]  # fmt: skip
INSTRUCTIONS = (
    "callboard runs cuelists: YAML lists of cues that specialist agents execute when the hub "
    "calls WARNING, STANDBY and GO. Validate a cuelist before it is submitted; start a run "
    "(or a dry run) of a stored cuelist; read the run: every cue's state and `reason` says "
    "what it waits for. A cue waiting for a condition (e.g. approval_received) needs "
    "raise_condition; an armed (manual) cue needs go. Open escalations are the operator's "
    "queue; an agent's question (cause input_required...) is answered with resolve_escalation "
    "and an answer."
)


def refusals(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """callboard's errors (NotFound, Conflict, a bad cuelist, no leader...) and refused
    arguments as tool errors, with the reason."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except (CallboardError, ValueError) as exc:  # pydantic's ValidationError is one
            raise ToolError(str(exc)) from None

    return call


def _asked(key: str | None, path: str) -> Asked | None:
    """The key of a tool call, as the REST route at `path` takes it from its header."""
    return None if key is None else Asked(key=key, path=path)


def build(hub: Hub) -> MCPServer:
    """An MCPServer whose tools act on `hub`."""
    tools: list[Tool] = []

    def tool(annotations: ToolAnnotations) -> Callable[[Callable[P, Awaitable[R]]], Any]:
        def register(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            tools.append(tool_as_sent(fn, annotations))
            return fn

        return register

    @tool(READ)
    @refusals
    async def list_cuelists() -> CuelistsPublic:
        """The stored cuelists: name, latest version, how many versions."""
        return await cuelist_routes.list_cuelists(hub)

    @tool(READ)
    @refusals
    async def get_cuelist(name: str) -> CuelistPublic:
        """One stored cuelist, every version, with its source as submitted."""
        return await cuelist_routes.get_cuelist(hub, name)

    @tool(READ)
    @refusals
    async def validate_cuelist(
        source: Annotated[str, Field(description="the cuelist as YAML (or JSON)")],
        strict: Annotated[bool, Field(description="conflicts are errors")] = False,
    ) -> ValidationPublic:
        """Every check a submitted cuelist gets (schema, graph, contracts, conflicts); stores
        nothing. Errors name the cue, the key and the line."""
        # As the REST route does: a big one is checked in a worker thread, not on the loop
        # the engine and the lease share (a character is at least a byte of the body).
        big = len(source) > cuelist_routes.BIG_BODY_BYTES
        check = functools.partial(validation.validate_text, source, strict=strict)
        return cuelist_routes.validation_public(await off_the_loop_if(big, check))

    async def _start(
        cuelist: str, version: str | None, params: dict[str, Any] | None, dry: bool,
        idempotency_key: str | None, budget: BudgetChange | None = None,
    ) -> RunCreated:  # fmt: skip
        body = RunCreate(
            cuelist=cuelist, version=version, params=params or {}, dry=dry, budget=budget
        )
        return await run_routes.create_run(body, hub, idempotency_key)

    @tool(WRITE)
    @refusals
    async def start_run(
        cuelist: str,
        version: Annotated[str | None, Field(description="default: the latest")] = None,
        params: dict[str, Any] | None = None,
        idempotency_key: Key = None,
        budget: Annotated[
            BudgetChange | None, Field(description="limits over the cuelist's own budget")
        ] = None,
    ) -> RunCreated:
        """Start a run of a stored cuelist; answers its run id."""
        return await _start(cuelist, version, params, False, idempotency_key, budget)

    @tool(WRITE)
    @refusals
    async def dry_run(cuelist: str, version: str | None = None) -> RunPublic:
        """Walk the cuelist with stand-in agents (nothing is sent to real ones): the order
        cues would fire in, the waits and conflicts met, as a run of status `dry`."""
        created = await _start(cuelist, version, None, True, None)
        return await run_routes.run_view(await load_run(hub, created.run_id))

    @tool(READ)
    @refusals
    async def get_run(run_id: RunId) -> RunPublic:
        """A run: its status, and every cue's state, `reason` (what it waits for), attempt,
        targets, times and error; the run record."""
        return await run_routes.run_view(await load_run(hub, run_id))

    @tool(READ)
    @refusals
    async def list_runs(
        limit: Annotated[int, Field(strict=False, ge=1, le=1000), AS_JSON_NUMBER] = 20,
        cuelist: str | None = None,
        status: Annotated[str | None, Field(description="running, holding, success...")] = None,
    ) -> RunsPublic:
        """The newest runs, optionally of one cuelist or in one status."""
        return await run_routes.list_runs(hub, limit, cuelist, status)

    @tool(WRITE)
    @refusals
    async def go(run_id: RunId, cue_id: str, idempotency_key: Key = None) -> GoPublic:
        """The operator's GO for an armed (manual) cue; refused, with the reason, otherwise."""
        run = await load_run(hub, run_id)
        key = _asked(idempotency_key, f"/v1/runs/{run_id}/cues/{cue_id}/go")
        return await run_routes.go(run, cue_id, hub, key)

    @tool(WRITE)
    @refusals
    async def raise_condition(
        run_id: RunId,
        name: Annotated[str, Field(description="e.g. approval_received")],
        idempotency_key: Key = None,
    ) -> ConditionPublic:
        """Raise a condition (a flag such as an approval) that cues of the run wait for."""
        run = await load_run(hub, run_id)
        key = _asked(idempotency_key, f"/v1/runs/{run_id}/conditions/{name}")
        return await run_routes.raise_condition(run, name, hub, key)

    @tool(ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False))
    @refusals
    async def cancel_run(
        run_id: RunId, reason: str | None = None, idempotency_key: Key = None
    ) -> CancelPublic:
        """Cancel the run: every cue not yet done is stood down."""
        run = await load_run(hub, run_id)
        key = _asked(idempotency_key, f"/v1/runs/{run_id}/cancel")
        return await run_routes.cancel(run, hub, CancelCreate(reason=reason), key)

    @tool(WRITE)
    @refusals
    async def change_budget(
        run_id: RunId, limits: BudgetChange, idempotency_key: Key = None
    ) -> BudgetPublic:
        """Set a run's budget limits (tokens, cost, messages, wall_s, counters; a limit left
        out is kept, null removes it). A run `holding` on a spent budget goes on when the
        new limits allow; answers the run's usage beside its limits."""
        run = await load_run(hub, run_id)
        key = _asked(idempotency_key, f"/v1/runs/{run_id}/budget")
        return await budget_routes.change_budget(run, limits, hub, key)

    @tool(READ)
    @refusals
    async def list_escalations(
        status: Annotated[str | None, Field(description="open, recorded or resolved")] = "open",
        run_id: str | None = None,
    ) -> EscalationsPublic:
        """The operator queue: timeouts, conflicts, failures, agents' questions."""
        return await escalation_routes.list_escalations(hub, status, run_id, 200)

    @tool(WRITE)
    @refusals
    async def resolve_escalation(
        escalation_id: str,
        answer: Annotated[
            str | None,
            Field(description="the answer to an agent's question (cause input_required)"),
        ] = None,
        winner: Annotated[
            str | None, Field(description="a conflict's winner: RUN/CUE or a cue id")
        ] = None,
        note: Annotated[str | None, Field(description="recorded with the resolution")] = None,
        idempotency_key: Key = None,
    ) -> EscalationPublic:
        """Resolve an escalation (binding): a conflict's winner, or the answer to an agent's
        question (the answer is sent to the agent that asked)."""
        body = EscalationResolve(winner=winner, note=note, answer=answer)
        key = _asked(idempotency_key, f"/v1/escalations/{escalation_id}/resolve")
        return await escalation_routes.resolve_escalation(hub, escalation_id, body, key)

    return MCPServer(
        "callboard", title="callboard", instructions=INSTRUCTIONS, version="1",
        log_level="WARNING", tools=tools,
    )  # fmt: skip
