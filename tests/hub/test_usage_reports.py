"""What a specialist reports against a run's budget cannot stall a real hub: reports past
the caps are refused, totals stop at the caps, and the hub goes on serving the run."""

from __future__ import annotations

import pytest

from hub.service import Hub
from protocols import payloads as p
from protocols.canonical import canonical_json
from protocols.codec import decode, encode
from protocols.keys import STREAM_FIELD
from protocols.messages import MessageType as T
from protocols.validation import load_cuelist
from tests.helpers import eventually

pytestmark = pytest.mark.redis
GREEDY = "cuelist: greedy\ncues:\n  - {id: ONLY, target_agents: [mallory], coordination: direct}\n"


async def test_usage_past_a_float_or_the_caps_leaves_the_hub_serving(hub: Hub) -> None:
    """mallory, the cue's one target, writes the context twice reporting a cost of 1e308,
    then completes reporting the most a report may hold, twice over in tokens. The sum of
    two such costs once went past a float's range inside the engine step: the step raised,
    the term ended, and the next term handled the same write again, so the run never
    finished. Now the writes past the cap are protocol violations, the completion counts,
    and the run succeeds with its totals at the caps."""
    client, keys = hub.transport._client, hub.keys
    parsed, version = load_cuelist(GREEDY)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), GREEDY)
    await hub.driver.start_run("greedy", version, "run-greedy", {}, False)

    async def assigned() -> list[object]:
        entries = await client.xrange(keys.inbox("mallory"))
        return [decode(f[STREAM_FIELD.encode()]) for _, f in entries]

    (task,) = await eventually(assigned, 10)
    huge = {"usage": {"cost": 1e308}}
    writes = [
        task.reply(T.TASK_CONTEXT, p.TaskContext(key=f"k{n}", value=n, metadata=huge))
        for n in range(2)
    ]
    most = p.Usage(tokens=p.USAGE_MAX, cost=p.COST_MAX, counters={"calls": p.USAGE_MAX})
    done = task.reply(T.STATUS_COMPLETED, p.StatusCompleted(attempt=1, usage=most))
    for message in (*writes, done):
        body = message.model_copy(update={"from_agent": "mallory"})
        await client.xadd(keys.out("mallory"), {STREAM_FIELD: encode(body)})

    async def finished() -> object:
        run = await hub.store.run("run-greedy")
        return run if run is not None and run.status.done else None

    run = await eventually(finished, 20)
    assert run.status.value == "success"  # type: ignore[attr-defined]
    assert run.usage == most  # type: ignore[attr-defined]
    causes = {e.cause for e in await hub.store.escalations(limit=100)}
    assert "bad_usage:mallory" in causes, causes
    assert hub.leading.is_set() and hub.driver.failed is None
