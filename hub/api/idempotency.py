"""`Idempotency-Key`: on POST /v1/runs, SET NX claims the key and every later request gets
its run; on every other operator command, the key keeps the command's reply.

The first request stores `{run_id, request fingerprint}` under the key (for PENDING_TTL_S)
before it asks for the run; the leader makes the key name the run for a day in the run's
own write. A concurrent or later request with the same key and body waits until that run
exists and answers with its id; the same key with another body is a 409. The key is let go
only when the engine refused the start (the run certainly does not exist); after a 503
(no leader, Redis refusing writes) it stays, so a retry gets the same run once the queued
command lands, and a command that was lost frees the key when PENDING_TTL_S runs out.

An operator command (GO, retry, rerun, a condition, cancel, a budget, a resolve, a
broadcast) with a key works the same way (`call`): the first request claims the key and
sends the command; the leader keeps the command's reply under the key for a day, in the
step that does what it asks (hub.serving); the same request again, at once or after a 503,
is answered with that reply and does nothing twice. A refusal lets the key go.

A pause or resume, which every engine partition serves, keeps a reply per partition
(`call_everywhere`). Sent again, it goes to each partition that kept none (one whose copy
was lost still gets it); when every one kept its reply it is answered from them, with no
leader needed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, cast

from fastapi import Depends, Header, Request
from pydantic import BaseModel

from hub.commands import Command
from hub.commands.models import R
from hub.service import Hub
from hub.store.commands import QueueFull
from hub.store.idempotency import CommandHold, IdempotencyHold
from protocols.errors import Conflict, EngineError, TransportError

# a request waiting on another's key looks again after POLL_S, then twice as long each
# time up to POLL_MAX_S: a burst of retries does not poll Redis 50 times a second each
POLL_S, POLL_MAX_S = 0.02, 0.32
KEY_MAX = 200  # characters of an idempotency key (the header, an MCP tool's argument)
KeyHeader = Annotated[
    str | None,
    Header(
        min_length=1, max_length=KEY_MAX,
        description="the same key and request again get the first one's answer, and do "
        "nothing twice (kept a day)",
    ),
]  # fmt: skip


class Asked(BaseModel):
    """An operator request that carried an `Idempotency-Key`: the key and the route asked."""

    key: str
    path: str


def asked(request: Request, idempotency_key: KeyHeader = None) -> Asked | None:
    return None if idempotency_key is None else Asked(key=idempotency_key, path=request.url.path)


AskedDep = Annotated[Asked | None, Depends(asked)]


def fingerprint(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


def request_text(body: BaseModel) -> str:
    """What a keyed request's body is compared by: the keys sent, sorted, with their values
    as validated. A key left out and one sent as null differ (in a budget change, null
    removes a limit); the order keys were sent in does not."""
    data = body.model_dump(mode="json", exclude_unset=True)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def claim(hub: Hub, key: str, run_id: str, request: str) -> str | None:
    """Claim `key` for `run_id`; None when claimed, else the run id that holds it."""
    store = hub.stores.idempotency
    hold = _hold(run_id, request)
    if await store.claim(key, hold):
        return None
    held = await store.get(key)
    if held is None:  # the holder failed and let go just now: try again
        return await claim(hub, key, run_id, request)
    if held.request != hold.request:
        raise Conflict(f"Idempotency-Key {key!r} was used with a different request")
    return held.run_id


async def release(hub: Hub, key: str, run_id: str, request: str) -> None:
    """Let go of a key whose run the engine refused (only while it holds that claim)."""
    await hub.stores.idempotency.release(key, _hold(run_id, request))


def _hold(run_id: str, request: str) -> IdempotencyHold:
    """What a start's key is claimed with (and let go of only while it still holds)."""
    return IdempotencyHold(run_id=run_id, request=fingerprint(request))


async def wait_for_run(hub: Hub, key: str, run_id: str, timeout_s: float) -> bool:
    """Wait until the holder's run exists (True) or the holder let go of the key (False)."""
    polls = _polls(timeout_s)
    while True:
        if await hub.store.run(run_id) is not None:
            return True
        held = await hub.stores.idempotency.get(key)
        if held is None or held.run_id != run_id:
            return False
        if (wait := next(polls, None)) is None:
            raise TransportError(f"run {run_id} for Idempotency-Key {key!r} did not start in time")
        await asyncio.sleep(wait)


def _polls(timeout_s: float) -> Iterator[float]:
    """The waits between looks at a key, from POLL_S doubling to POLL_MAX_S, until
    `timeout_s` from now has passed."""
    deadline, wait = time.monotonic() + timeout_s, POLL_S
    while (left := deadline - time.monotonic()) > 0:
        yield min(wait, left)
        wait = min(wait * 2, POLL_MAX_S)


async def call(
    hub: Hub,
    key: Asked | None,
    kind: type[Command[R]],
    command: Callable[[], Awaitable[Command[R]]],
    body: BaseModel | None = None,
) -> R:
    """The reply to the command of `kind` that `command` makes (after the route's checks,
    which may refuse it), sent once per `key` (see above): a request whose key holds a
    reply gets that reply before any check (a GO's retry after its cue went on is answered
    as the GO was); one whose key's command is being served waits for its reply (503 when
    it does not come in time, the key kept for a retry); the same key with another route
    or body is a 409."""
    timeout_s = hub.settings.command_timeout_s
    if key is None:
        return await hub.commands.call(await command(), timeout_s=timeout_s)
    request = _request(key, body)
    keyed = {"idempotency_key": key.key, "request": request}
    made: Command[R] | None = None
    keys = hub.stores.command_keys
    polls = _polls(timeout_s)
    while True:
        held = await keys.get(key.key)
        if held is not None:
            if held.request != request:
                raise Conflict(f"Idempotency-Key {key.key!r} was used with a different request")
            if held.reply is not None:
                return cast(R, kind.reply_model.model_validate(held.reply))
            if (wait := next(polls, None)) is None:
                raise TransportError(
                    f"the request with Idempotency-Key {key.key!r} is still being served: "
                    "try again with the same key"
                )
            await asyncio.sleep(wait)
            continue
        if made is None:
            made = (await command()).model_copy(update=keyed)
        if await keys.claim(key.key, CommandHold(request=request)):
            try:
                return await hub.commands.call(made, timeout_s=timeout_s)
            except (EngineError, QueueFull):  # refused, or not queued: nothing was done,
                await keys.release(key.key, request)  # the key is free for another try
                raise


async def call_everywhere(
    hub: Hub, key: Asked | None, command: Command[R], body: BaseModel | None = None
) -> R:
    """The reply (partition 0's) to `command`, which every partition serves, each keeping
    its own reply under `key`: sent to the partitions that kept none yet, and answered from
    the kept replies alone when every one did (the same key with another body: a 409)."""
    timeout_s = hub.settings.command_timeout_s
    if key is None:
        return await hub.commands.call(command, timeout_s=timeout_s)
    request = _request(key, body)
    made = command.model_copy(update={"idempotency_key": key.key, "request": request})
    parts = await hub.commands.partitions_of(made)
    holds = await asyncio.gather(*(hub.stores.command_keys.get(key.key, p) for p in parts))
    if any(held is not None and held.request != request for held in holds):
        raise Conflict(f"Idempotency-Key {key.key!r} was used with a different request")
    kept = [held.reply if held is not None else None for held in holds]
    left = [p for p, reply in zip(parts, kept, strict=True) if reply is None]
    if not left:
        return made.read_reply(kept[0])
    answer = await hub.commands.call(made, timeout_s=timeout_s, only=left)
    return answer if kept[0] is None else made.read_reply(kept[0])


def _request(key: Asked, body: BaseModel | None) -> str:
    """The fingerprint of a keyed request: its route and body."""
    return fingerprint(f"{key.path}\n{request_text(body) if body is not None else ''}")
