"""Replicas as real processes: SIGTERM drain, kill -9 mid-task, a restart finishing the work."""

# Payloads are read through the Envelope base type; their fields are checked at run time.
# mypy: disable-error-code="attr-defined"

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from protocols.messages import MessageType
from tests.helpers import eventually
from tests.specialists.conftest import HubSide, Spawner

pytestmark = [pytest.mark.redis, pytest.mark.slow]

M = MessageType
FAST = {
    "CALLBOARD_MIN_IDLE_MS": "300",
    "CALLBOARD_CLAIM_INTERVAL_MS": "100",
    "CALLBOARD_BLOCK_MS": "200",
}
SIDE_EFFECT = "tests.specialists.sample:SideEffect"


async def _online(hub: HubSide, *replicas: str) -> None:
    async def all_online() -> bool:
        seen = {m.payload.replica for m in await hub.of(M.STATUS_ONLINE)}
        return set(replicas) <= seen

    await eventually(all_online, 20, message=f"{replicas} online")


async def test_sigterm_drains_reports_offline_and_exits_0(spawn: Spawner, hub: HubSide) -> None:
    replica = spawn("echo", "r1", **FAST)
    await _online(hub, "r1")
    await hub.go("CUE-1", execute_ms=700)
    await hub.wait(M.STATUS_STARTED, "CUE-1")
    replica.signal(signal.SIGTERM)
    await eventually(lambda: replica.proc.poll() is not None, 10, message="exit")
    assert replica.proc.returncode == 0, replica.output()
    kinds = [m.message_type for m in await hub.out()]
    assert kinds == [M.STATUS_ONLINE, M.STATUS_STARTED, M.STATUS_COMPLETED, M.STATUS_OFFLINE]
    [offline] = await hub.of(M.STATUS_OFFLINE)
    assert offline.payload.model_dump() == {"replica": "r1", "reason": "SIGTERM"}
    assert await hub.pending() == 0


async def test_kill_9_mid_task_the_other_replica_finishes_it_once(
    spawn: Spawner, hub: HubSide, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    replicas = {name: spawn(SIDE_EFFECT, name, **FAST) for name in ("r1", "r2")}
    await _online(hub, "r1", "r2")
    await hub.go("CUE-1", path=str(effects), hang_ms=60_000)
    # Whoever took the GO does the side effect, then hangs: kill it right there.
    doer = str(await eventually(lambda: effects.exists() and effects.read_text().strip(), 10))
    replicas[doer].proc.kill()
    replicas[doer].proc.wait(5)
    survivor = ({"r1", "r2"} - {doer}).pop()
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1", timeout_s=10)
    assert done.payload.replica == survivor
    assert done.payload.result == {"wrote": False, "replica": survivor}
    assert effects.read_text() == f"{doer}\n"  # the side effect happened exactly once
    await eventually(lambda: _acked(hub), message="the GO is acked")
    assert len(await hub.of(M.STATUS_COMPLETED)) == 1
    assert await hub.of(M.STATUS_FAILED) == []


async def _acked(hub: HubSide) -> bool:
    return await hub.pending() == 0


async def test_a_restarted_replica_finishes_its_own_work(
    spawn: Spawner, hub: HubSide, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    first = spawn(SIDE_EFFECT, "r1", **FAST)
    await _online(hub, "r1")
    await hub.go("CUE-1", path=str(effects), hang_ms=60_000)
    # the line written, not only the file made (a kill between the two loses the line)
    await eventually(lambda: effects.exists() and effects.read_text() == "r1\n", 10)
    first.proc.kill()
    first.proc.wait(5)
    spawn(SIDE_EFFECT, "r1", **FAST)  # same name: its pending GO is reclaimed once idle
    [done] = await hub.wait(M.STATUS_COMPLETED, "CUE-1", timeout_s=15)
    assert done.payload.result == {"wrote": False, "replica": "r1"}
    assert effects.read_text() == "r1\n"
    await eventually(lambda: _acked(hub))


async def test_echo_runs_from_the_command_line_with_a_contract(
    spawn: Spawner, hub: HubSide, tmp_path: Path
) -> None:
    contract = tmp_path / "contract.yaml"
    contract.write_text("agent:\n  id: agent-a\n  requires: [spec]\n  provides: [code]\n")
    replica = spawn("echo", "r1", "--contract", str(contract), "--concurrency", "2", **FAST)
    await _online(hub, "r1")
    [online] = await hub.of(M.STATUS_ONLINE)
    assert online.payload.kind == "echo"
    assert online.payload.concurrency == 2
    assert online.payload.contract.requires == ("spec",)
    replica.signal(signal.SIGINT)
    await eventually(lambda: replica.proc.poll() is not None, 10)
    assert replica.proc.returncode == 0


def test_unknown_kind_exits_2(spawn: Spawner) -> None:
    replica = spawn("nope", "r1")
    assert replica.wait() == 2
    assert "unknown specialist kind 'nope'" in replica.output()
