"""Running the kit: registration first, then each check, then what must hold over the whole
session (every message valid, nothing left pending); one result per behaviour."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from functools import partial

from callboard.conformance.checks import CHECKS
from callboard.conformance.stage import GHOST, Failed, Stage, Timing
from callboard.conformance.watch import OutWatch, Seen
from protocols.errors import TransportError
from protocols.keys import HUB_GROUP, Keys, is_agent_id
from protocols.messages import SPECIALIST_SENDS
from protocols.messages import MessageType as T
from protocols.payloads import StatusOnline
from protocols.transport import Probe

FIRST = "registers"
LAST = ("speaks-the-protocol", "leaves-nothing-pending")
ALL_CHECKS = (FIRST, *CHECKS, *LAST)
Exited = Callable[[], "int | None"]  # the started agent's exit code, None while it runs


class Unusable(Exception):
    """The kit cannot run here (no Redis, a hub on the prefix, a bad agent id)."""


@dataclass
class Result:
    check: str
    passed: bool
    detail: str
    seconds: float


@dataclass
class Report:
    agent: str
    prefix: str
    results: list[Result] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def to_dict(self) -> dict[str, object]:
        return {
            "agent": self.agent,
            "prefix": self.prefix,
            "passed": self.passed,
            "checks": [asdict(r) for r in self.results],
        }


async def run_kit(
    redis_url: str,
    agent: str,
    *,
    prefix: str,
    timing: Timing | None = None,
    only: list[str] | None = None,
    start: Callable[[], Exited] | None = None,
) -> Report:
    """Check `agent`: already running, or started by `start` once the kit watches (`start`
    returns a function telling the agent's exit code once it has exited, else None)."""
    if not is_agent_id(agent):
        raise Unusable(f"{agent!r} is not an agent id")
    unknown = sorted(set(only or ()) - set(ALL_CHECKS))
    if unknown:
        raise Unusable(f"unknown checks {unknown}; the checks are {', '.join(ALL_CHECKS)}")
    keys, timing = Keys(prefix), timing or Timing()
    probe: Probe = Probe.from_url(redis_url, keys, retry_s=2.0)
    try:
        out = keys.out(agent)
        try:
            if HUB_GROUP in await probe.groups(out):
                raise Unusable(
                    f"a hub reads {out} (group {HUB_GROUP!r}): run the kit under a prefix "
                    "that no hub uses"
                )
            start_id = await probe.last_id(out) if start is not None else "0-0"
        except TransportError as exc:
            raise Unusable(f"cannot use Redis at {redis_url}: {exc}") from None
        watch = OutWatch(probe, out, start_id)
        watch.start()
        try:
            exited = start() if start is not None else _running
            stage = Stage(probe, keys, agent, watch, timing)
            return await _run(stage, Report(agent, prefix), only, exited)
        finally:
            await watch.stop()
            await probe.delete_consumer(keys.inbox(agent), agent, GHOST)
    finally:
        await probe.close()


def _running() -> int | None:
    return None


async def _run(stage: Stage, report: Report, only: list[str] | None, exited: Exited) -> Report:
    wanted = [name for name in ALL_CHECKS if not only or name in only or name == FIRST]
    registered = await _timed(report, FIRST, partial(registers, stage, exited))
    for name in wanted[1:]:
        if not registered:
            report.results.append(Result(name, False, "not run: the agent did not register", 0))
            continue
        check = CHECKS.get(name) or _FINAL[name]
        await _timed(report, name, partial(check, stage))
    return report


async def _timed(report: Report, name: str, check: Callable[[], Awaitable[str]]) -> bool:
    began = time.monotonic()
    try:
        detail, passed = await check(), True
    except Failed as exc:
        detail, passed = str(exc), False
    except (TransportError, RuntimeError) as exc:
        detail, passed = f"the kit could not run it: {exc}", False
    report.results.append(Result(name, passed, detail, round(time.monotonic() - began, 3)))
    return passed


async def registers(stage: Stage, exited: Exited = _running) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + stage.timing.start_timeout_s
    online: list[Seen] = []
    while not online and loop.time() < deadline:  # looking in on the agent now and then
        online = await stage.watch.wait(lambda m: m.message_type is T.STATUS_ONLINE, 0.25)
        if not online and (code := exited()) is not None:
            raise Failed(f"the agent exited (code {code}) before it registered")
    if not online:
        raise Failed(f"no status.online within {stage.timing.start_timeout_s:g}s")
    if "contract" not in _raw_payload(online[-1].raw):
        raise Failed("status.online carries no contract (send one, even an empty one)")
    body = online[-1].body(StatusOnline)
    if not is_agent_id(body.replica):
        raise Failed(f"status.online names replica {body.replica!r}: not a usable name")
    while stage.agent not in await stage.probe.groups(stage.inbox):
        if loop.time() >= deadline:
            raise Failed(f"no consumer group {stage.agent!r} on {stage.inbox}")
        await asyncio.sleep(0.05)
    contract = body.contract.model_dump(mode="json", exclude_defaults=True)
    return f"replica {body.replica}, kind {body.kind}, contract {contract or '{}'}"


def _raw_payload(raw: bytes) -> dict[str, object]:
    """The payload as sent, before defaults filled it in (the entry decoded already)."""
    payload = json.loads(raw).get("payload")
    return payload if isinstance(payload, dict) else {}


async def speaks_the_protocol(stage: Stage) -> str:
    seen = stage.watch.seen
    bad = [f"{s.entry_id}: {s.error}" for s in seen if s.message is None]
    ids: dict[str, bytes] = {}
    for s in seen:
        m = s.message
        if m is None:
            continue
        if m.from_agent not in ("", stage.agent):
            bad.append(f"{s.entry_id}: from_agent {m.from_agent!r} is another agent")
        if m.message_type not in SPECIALIST_SENDS:
            bad.append(f"{s.entry_id}: {m.message_type.value} is not for a specialist to send")
        if ids.setdefault(m.message_id, s.raw) != s.raw:
            bad.append(f"{s.entry_id}: message_id {m.message_id} reused for another message")
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        raise Failed("; ".join(bad[:3]) + more)
    return f"{len(seen)} messages, every one valid"


async def leaves_nothing_pending(stage: Stage) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + stage.timing.settle_s
    while pending := await stage.pending():
        if loop.time() >= deadline:
            listed = ", ".join(f"{i} ({c}, delivered {n}x)" for i, c, n in pending[:5])
            raise Failed(f"{len(pending)} inbox entries pending: {listed}")
        await asyncio.sleep(0.05)
    return "no inbox entry pending"


_FINAL = {
    "speaks-the-protocol": speaks_the_protocol,
    "leaves-nothing-pending": leaves_nothing_pending,
}
