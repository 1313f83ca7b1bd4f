"""A run whose first cue waits for its operator's GO, its targets never online (what the
hub sends them stays in their inbox, to be counted): for the tests of operator commands."""

from __future__ import annotations

from hub import commands as c
from hub.service import Hub
from protocols.canonical import canonical_json
from protocols.ids import new_id
from protocols.keys import Keys
from protocols.validation import load_cuelist
from tests.helpers import eventually

AGENT = "served-nobody"  # never online
HELD = f"""
cuelist: served-again
budget: {{tokens: 100}}
defaults: {{ack_timeout_s: 600}}
cues:
  - {{id: FIRST, target_agents: [{AGENT}], manual: true}}
  - {{id: SECOND, target_agents: [{AGENT}], manual: true, depends_on: [FIRST]}}
"""


async def armed_run(hub: Hub, run_id: str | None = None) -> str:
    """A run of HELD whose FIRST cue waits for its operator's GO."""
    parsed, version = load_cuelist(HELD)
    await hub.cuelists.put(parsed, version, canonical_json(parsed), HELD)
    run_id = run_id or new_id()
    await hub.commands.call(c.StartRun(cuelist="served-again", version=version, run_id=run_id))

    async def armed() -> bool:
        run = await hub.store.run(run_id)
        return run is not None and run.cues["FIRST"].state.value == "armed"

    await eventually(armed, 10, message="FIRST armed")
    return run_id


async def sent_to_agent(hub: Hub, keys: Keys) -> int:
    """How many messages the hub sent AGENT."""
    return int(await hub.transport._client.xlen(keys.inbox(AGENT)))
