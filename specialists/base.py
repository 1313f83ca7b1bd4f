"""The `Specialist` class authors subclass: its handler hooks, `run()` and the sync `main()`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from protocols.codec import Envelope
from protocols.contracts import Contract
from protocols.keys import is_agent_id
from protocols.outage import Outage, is_unreachable, one_line, redacted
from protocols.payloads import BroadcastNotice, TaskHandoff, TaskInput
from protocols.process import run, tune_gc
from protocols.settings import Settings
from protocols.targeting import parse_labels
from protocols.transport import Transport
from specialists.cue import Cue, Result

if TYPE_CHECKING:  # imported only when tracing is on
    from specialists.tracing import SpecialistTracer

log = logging.getLogger("callboard.specialists")

Readiness = bool | tuple[bool, str] | None


def default_replica() -> str:
    """`{host}-{pid}`, squeezed into the agent id alphabet."""
    host = re.sub(r"[^a-z0-9_.-]+", "-", socket.gethostname().lower()).strip("-.") or "replica"
    return f"{host[:48]}-{os.getpid()}"


class Specialist:
    """Subclass and override the hooks; every hook has a harmless default.

        class Builder(Specialist):
            kind = "builder"
            async def prepare(self, cue): ...            # after coord.warning, in background
            async def ready(self, cue): return True      # coord.standby -> ack.standby
            async def execute(self, cue): return {"ok": 1}  # coord.go / task.assign

    Raise `Retry(delay_s=...)` or `Reject(reason)` from a hook to steer delivery.
    """

    kind: ClassVar[str] = "custom"
    contract: Contract = Contract()
    done_ttl_s: ClassVar[int] = 7 * 24 * 3600  # lifetime of done-markers
    drain_timeout_s: ClassVar[float] = 30.0  # how long a stop waits for work in progress
    # how long `standdown`, `on_input` or `on_handoff` may take: one that never returned
    # would hold its inbox entry for ever (renewed, never reclaimed)
    hook_timeout_s: ClassVar[float] = 30.0

    def __init__(
        self,
        agent_id: str,
        replica: str | None = None,
        settings: Settings | None = None,
        contract: Contract | None = None,
        concurrency: int = 1,
        *,
        transport: Transport | None = None,
        labels: Mapping[str, str | int | float | bool] | None = None,
    ) -> None:
        replica = replica or default_replica()
        for what, name in (("agent id", agent_id), ("replica name", replica)):
            if not is_agent_id(name):
                raise ValueError(f"bad {what} {name!r}: use [a-z0-9][a-z0-9_.-]*, at most 63")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.agent_id = agent_id
        self.replica = replica
        self.settings = settings or Settings()
        if contract is not None:
            self.contract = contract
        # labels: the contract's, then CALLBOARD_LABELS, then the `labels` argument
        merged = {**self.contract.labels, **parse_labels(self.settings.labels), **(labels or {})}
        if merged != self.contract.labels:
            self.contract = Contract.model_validate(
                {**self.contract.model_dump(), "labels": merged}
            )  # validated: the bounds on labels hold for what the SDK sends too
        self.concurrency = concurrency
        self._transport = transport
        self._runtime: Any = None
        # the replica's spans (specialists.tracing), made in `run` when tracing is on; a test
        # may set one before `run`
        self.tracer: SpecialistTracer | None = None
        self._stop_reason: str | None = None
        self._stopped: asyncio.Event | None = None

    # -- hooks ---------------------------------------------------------------------------

    async def setup(self) -> None:
        """Called once before the replica announces itself (open clients here)."""

    async def teardown(self) -> None:
        """Called once after the replica went offline."""

    async def prepare(self, cue: Cue) -> None:
        """WARNING: get ready in the background. An exception makes the replica not ready."""

    async def ready(self, cue: Cue) -> Readiness:
        """STANDBY: self-declared readiness; `False` or `(False, "why")` when not ready."""
        return True

    async def execute(self, cue: Cue) -> Result | dict[str, Any] | None:
        """GO / task.assign: do the work. Return a Result or a dict; raise to fail."""
        return None

    async def standdown(self, cue: Cue, reason: str) -> None:
        """coord.standdown: the cue will not GO (this attempt); release what prepare took.
        Past `hook_timeout_s` it is cancelled and the standdown acknowledged all the same."""

    async def on_handoff(self, handoff: TaskHandoff, message: Envelope) -> None:
        """A `task.handoff` to this agent, forwarded by the hub once checked. Past
        `hook_timeout_s` it is cancelled and the entry dead-lettered, saying so."""

    async def on_input(self, answer: TaskInput, message: Envelope) -> None:
        """`task.input`: an operator answered a question this agent asked with
        `cue.escalate("input_required...", ...)`. Raise `Retry` or `Reject` to steer; past
        `hook_timeout_s` it is cancelled and the entry dead-lettered, saying so."""

    async def on_broadcast(self, notice: BroadcastNotice, message: Envelope) -> None:
        """A `broadcast.notice` from the hub (each in a task of its own: notices may overlap)."""

    # -- running -------------------------------------------------------------------------

    async def run(self) -> None:
        """Run this replica until `stop()`, SIGTERM (via `main`) or `broadcast.shutdown`."""
        from specialists.runtime import Runtime

        settings = self.settings
        transport = self._transport or Transport.from_url(
            settings.redis_url,
            settings.keys,
            max_message_bytes=settings.max_message_bytes,
            max_deliveries=settings.max_deliveries,
        )
        self._stopped = stopped = asyncio.Event()
        if self._stop_reason is not None:
            stopped.set()
        if self.tracer is None and settings.tracing_on:
            from specialists.tracing import SpecialistTracer

            self.tracer = SpecialistTracer.from_settings(settings, self.agent_id, self.replica)
        # the work's span, OpenTelemetry's current span in the runtime's tasks
        tracer = self.tracer
        current = tracer.install() if tracer is not None else None
        try:
            if not await self._reach_redis(transport, stopped):
                return  # stopped while Redis was out of reach: nothing to drain
            self._runtime = Runtime(self, transport)
            if self._stop_reason is not None:
                self._runtime.stop(self._stop_reason)
            await self._runtime.run()
        finally:
            self._runtime = None
            if self._transport is None:
                await transport.close()
            if self.tracer is not None:  # export what is left (it may wait on the network)
                await asyncio.to_thread(self.tracer.spans.flush)
            if tracer is not None and current is not None:
                tracer.uninstall(current)

    async def _reach_redis(self, transport: Transport, stopped: asyncio.Event) -> bool:
        """Wait until Redis answers (False if stopped first): one log line while it does
        not, retries backing off, instead of a traceback (REDIS_URL wrong, Redis not up).
        Each try is one quick attempt (the transport's own retries off): this loop waits."""
        outage = Outage()
        where = redacted(self.settings.redis_url)
        inbox = self.settings.keys.inbox(self.agent_id)
        retry_s, transport.retry_s = transport.retry_s, 0.0
        try:
            while not stopped.is_set():
                # the first thing the replica does anyway (idempotent): is Redis there?
                attempt = asyncio.ensure_future(transport.ensure_group(inbox, self.agent_id))
                halt = asyncio.ensure_future(stopped.wait())
                await asyncio.wait({attempt, halt}, return_when=asyncio.FIRST_COMPLETED)
                halt.cancel()
                if not attempt.done():
                    attempt.cancel()
                    break
                exc = attempt.exception()
                if exc is None:
                    if outage.ok():
                        log.info("%s/%s: Redis at %s answers", self.agent_id, self.replica, where)
                    return True
                if not is_unreachable(exc):
                    raise exc
                delay_s, say = outage.fail()
                if say:
                    log.error(
                        "%s/%s: Redis at %s is unreachable (%s); retrying (REDIS_URL sets it)",
                        self.agent_id, self.replica, where, one_line(exc),
                    )  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopped.wait(), delay_s)
            return False
        finally:
            transport.retry_s = retry_s

    @property
    def state(self) -> str:
        """`offline`, `running`, `paused` (broadcast.pause) or `draining`."""
        return "offline" if self._runtime is None else self._runtime.state

    def stop(self, reason: str = "stopped") -> None:
        """Drain: stop reading, finish work in progress, send status.offline, return."""
        self._stop_reason = reason
        if self._stopped is not None:
            self._stopped.set()
        if self._runtime is not None:
            self._runtime.stop(reason)

    def main(self) -> int:
        """Run in a fresh event loop with SIGTERM/SIGINT draining; returns an exit code."""
        return main(self)


def main(specialist: Specialist) -> int:
    """Run `specialist` until a signal drains it: 0 on a clean stop, 1 when it crashed.
    A second signal during the drain stops at once (work in progress stays pending)."""
    tune_gc()

    async def _run() -> None:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()

        def on_signal(name: str) -> None:
            if specialist._stop_reason is None:
                specialist.stop(name)
            elif me is not None:
                me.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig.name)
        await specialist.run()

    try:
        run(_run())  # on uvloop when installed (protocols.process)
    except asyncio.CancelledError:
        log.warning("%s/%s stopped without draining", specialist.agent_id, specialist.replica)
        return 1
    except Exception as exc:
        if not is_unreachable(exc):
            log.exception("specialist %s/%s crashed", specialist.agent_id, specialist.replica)
            return 1
        log.error(
            "specialist %s/%s stopped: Redis at %s is unreachable (%s)",
            specialist.agent_id, specialist.replica,
            redacted(specialist.settings.redis_url), one_line(exc),
        )  # fmt: skip
        return 1
    return 0
