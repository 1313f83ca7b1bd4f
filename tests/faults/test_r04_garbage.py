"""Row 4: garbage XADDed straight into a stream the hub reads (`out`) and one a specialist
reads (`in`): not JSON, an unknown type, a payload of the wrong schema, a 1 MiB field. Each
is dead-lettered on its first delivery with the reason; the hub and the specialist never
restart, and a run still succeeds afterwards."""

from __future__ import annotations

import json

import httpx
import pytest
import redis

from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from tests.e2e.procs import Procs, wait_done, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import dead_letters, start, submit
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

AGENT = "fx-garbage"
GARBAGE = {
    "not_json": b"{this is not json",
    "unknown_type": json.dumps({"message_type": "status.exploded", "payload": {}}).encode(),
    "wrong_schema": json.dumps(
        {"message_type": "status.completed", "payload": {"attempt": "many", "x": 1}}
    ).encode(),
    "one_mib": b"x" * (1024 * 1024),
}
EXPECTED_REASON = {
    "not_json": "not JSON",
    "unknown_type": "unknown message_type",
    "wrong_schema": "bad field",
    "one_mib": "over the 262144 limit",
}


def test_garbage_is_dead_lettered_on_first_delivery(
    procs: Procs, redis_server: EmbeddedServer, figure: Figure
) -> None:
    keys = Keys(procs.env["CALLBOARD_PREFIX"])
    r = redis.Redis.from_url(redis_server.url)
    try:
        url = procs.hub()
        hub_proc = procs.procs[-1]
        agent_proc = procs.echo(AGENT)
        api = httpx.Client(base_url=url, timeout=10)
        wait_online(api, [AGENT])
        hub_id = api.get("/healthz").json()["hub_id"]
        # keyed by (stream, entry id): two streams can hand out the same id in one millisecond
        sent: dict[tuple[str, str], str] = {}
        for stream in (keys.out(AGENT), keys.inbox(AGENT)):
            for kind, raw in GARBAGE.items():
                sent[(stream, r.xadd(stream, {"m": raw}).decode())] = kind

        def all_dead() -> dict[tuple[str, str], dict[str, str]]:
            letters = {(d["stream"], d["entry_id"]): d for d in dead_letters(r, keys)}
            return letters if set(sent) <= set(letters) else {}

        found = eventually_sync(all_dead, 20, message="every garbage entry dead-lettered")
        reasons_ok = all(
            EXPECTED_REASON[sent[entry_id]] in found[entry_id]["reason"] for entry_id in sent
        )
        first = all(found[entry_id]["deliveries"] == "1" for entry_id in sent)
        submit(api, {"cuelist": "after-garbage", "cues": [{"id": "C", "target_agents": [AGENT]}]})
        run = wait_done(api, start(api, "after-garbage"))
        alive = hub_proc.poll() is None and agent_proc.poll() is None
        same_hub = api.get("/healthz").json()["hub_id"] == hub_id
        hub_log = procs.log(f"hub-{url.rsplit(':', 1)[1]}")
        figure(
            row=4,
            fault="garbage XADDed into out (hub) and in (specialist): not JSON, unknown type, "
            "wrong schema, 1 MiB field",
            promise="dead-lettered on first delivery with the reason; no restart",
            measured=f"{len(set(sent) & set(found))}/{len(sent)} dead-lettered, deliveries="
            f"{sorted({found[e]['deliveries'] for e in sent if e in found})}, reasons named: "
            f"{reasons_ok}; processes alive: {alive}; follow-up run {run['status']}",
        )
        assert set(sent) <= set(found)
        assert first and reasons_ok, {e: (sent[e], found[e]["reason"]) for e in sent}
        assert {stream for stream, _ in sent} == {keys.out(AGENT), keys.inbox(AGENT)}
        assert alive and same_hub
        assert "restarting" not in hub_log and "crashed" not in hub_log
        assert run["status"] == "success"
        escalations = api.get("/v1/escalations").json()
        assert "protocol_violation" in json.dumps(escalations)
        api.close()
    finally:
        r.close()
