"""The `a2a` specialist: stands in for a remote A2A agent, through the official `a2a-sdk` client.

Action: `{url?, skill?, text?, data?}`. `url` is the agent's base URL (its card is at
`{url}/.well-known/agent-card.json`; a replica started with `--url` serves one agent and
needs none); `skill` must be one of the card's skills; `text` is the message (default: the
cue's description); `data` rides along as a data part. The message carries `skill` in its
metadata, message id = the GO's message id, context id = the run id.

WARNING resolves the card and checks the skill; STANDBY is ready when the card answers and
the agent accepts our token; GO sends and follows the task (streaming when the card says
so, else polling). COMPLETED completes the cue, each artifact written to the run's context
as `{cue}.{artifact name}`; FAILED, REJECTED, CANCELED and AUTH_REQUIRED fail it;
INPUT_REQUIRED reports `status.blocked` and asks an operator (an escalation whose answer
comes back as `task.input` and goes to the task as the next message). A standdown cancels
the task; a redelivered GO finds the task it started (a done-marker holds its id, else the
agent's task list by message id) and follows it instead of sending again. A card, or a
task as it is followed, past one message's size (`max_message_bytes`) is read no further:
the cue is not ready, or fails, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any, ClassVar

from a2a.helpers import new_data_part, new_text_part
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import A2AError
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from protocols.codec import Envelope
from protocols.payloads import ASKS_INPUT, TaskInput
from specialists.base import Readiness, Specialist
from specialists.builtin.a2a_remote import (
    TERMINAL,
    Remote,
    artifact_value,
    follow,
    state_name,
    text_of,
)
from specialists.cue import Cue, Entry, Result
from specialists.errors import Reject

log = logging.getLogger("callboard.specialists.a2a")
TASK = "a2a-task"  # the done-marker holding the remote task id of an attempt
ARTIFACTS_MAX = 64  # artifacts of a completed task taken into the run's context (the first)


class A2ASettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CALLBOARD_A2A_", extra="ignore")

    url: str | None = None  # the agent a replica serves when the action names none (--url)
    token: SecretStr | None = None  # bearer token for every agent...
    tokens: dict[str, SecretStr] = {}  # ...or per agent base URL (JSON in the env)
    timeout_s: float = 30.0
    poll_s: float = 1.0  # tasks/get interval while polling or waiting for input
    card_ttl_s: float = 60.0


class RemoteFailed(Exception):
    """The remote task ended without completing."""


class A2A(Specialist):
    kind = "a2a"
    takes_url: ClassVar[bool] = True

    def __init__(
        self, *args: Any, url: str | None = None, a2a_settings: A2ASettings | None = None,
        **kw: Any,
    ) -> None:  # fmt: skip
        super().__init__(*args, **kw)
        self.a2a_settings = a2a_settings or A2ASettings()
        self.url = url or self.a2a_settings.url
        self.remotes: dict[str, Remote] = {}
        self.wakes: dict[str, asyncio.Event] = {}  # task id -> wakes its follower

    async def teardown(self) -> None:
        for remote in self.remotes.values():
            await remote.close()

    def remote(self, action: dict[str, Any]) -> Remote:
        url = action.get("url") or self.url
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise Reject(f"no agent URL: set action.url or start the replica with --url ({url!r})")
        url = url.rstrip("/")
        if url not in self.remotes:
            conf = self.a2a_settings
            secret = conf.tokens.get(url) or conf.token
            hooks: dict[str, list[Any]] = {}
            if self.tracer is not None:  # W3C traceparent on every call (specialists.tracing)
                from specialists.tracing import request_hooks

                hooks = request_hooks(self.tracer)
            self.remotes[url] = Remote(
                url, secret.get_secret_value() if secret else None,
                timeout_s=conf.timeout_s, card_ttl_s=conf.card_ttl_s, event_hooks=hooks,
                limit_bytes=self.settings.max_message_bytes,
            )  # fmt: skip
        return self.remotes[url]

    async def _check_skill(self, cue: Cue, *, fresh: bool) -> Remote:
        remote = self.remote(cue.action)
        card = await remote.card(fresh=fresh)
        skill = cue.action.get("skill")
        skills = [s.id for s in card.skills]
        if skill is not None and skill not in skills:
            have = ", ".join(skills) or "none"
            raise LookupError(
                f"agent {card.name!r} at {remote.url} has no skill {skill!r} ({have})"
            )
        return remote

    # -- WARNING, STANDBY ----------------------------------------------------------------

    async def prepare(self, cue: Cue) -> None:
        await self._check_skill(cue, fresh=True)

    async def ready(self, cue: Cue) -> Readiness:
        try:
            remote = await self._check_skill(cue, fresh=False)
            return await remote.auth_works()
        except (A2AError, LookupError, Reject) as exc:
            return False, str(exc)

    # -- GO ------------------------------------------------------------------------------

    async def execute(self, cue: Cue) -> Result:
        remote = await self._check_skill(cue, fresh=False)
        task_id = await cue.recall(TASK)
        if task_id is None and cue.deliveries > 1:  # a crash may have come before the marker
            task_id = await remote.find(cue.run_id or "", cue.message.message_id)
        first = None if task_id is not None else remote.send(self._message(cue))
        if task_id is not None:
            log.info("%r: following task %s again (GO delivered again)", cue, task_id)
        wake = asyncio.Event()
        asked: set[str] = set()
        try:
            async for task in follow(remote, first, task_id, self.a2a_settings.poll_s, wake):
                if task.id != task_id:
                    task_id = str(task.id)
                    cue.state["task_id"] = task_id
                    self.wakes[task_id] = wake
                    await cue.remember(TASK, task_id)
                state = task.status.state
                if state == TaskState.TASK_STATE_COMPLETED:
                    with contextlib.suppress(A2AError):  # the agent's own copy, artifacts whole
                        task = await remote.get(task_id)
                    return self._completed(cue, remote, task)
                if state == TaskState.TASK_STATE_INPUT_REQUIRED:
                    await self._ask(cue, task, asked)
                elif state == TaskState.TASK_STATE_AUTH_REQUIRED:
                    raise RemoteFailed(f"remote task {task.id} needs authorization we cannot give")
                elif state in TERMINAL:  # failed, rejected, canceled
                    why = text_of(task.status.message) or "no reason given"
                    raise RemoteFailed(f"remote task {task.id} {state_name(state)}: {why}")
                # submitted, working: keep following
        finally:
            if task_id is not None:
                self.wakes.pop(task_id, None)
        raise RemoteFailed(f"the remote task {task_id} ended without a final state")

    def _message(self, cue: Cue) -> Message:
        action = cue.action
        text = action.get("text") or cue.description or cue.cue_id
        parts: list[Part] = [new_text_part(str(text))]
        if action.get("data") is not None:
            parts.append(new_data_part(action["data"]))
        metadata = {"skill": action["skill"]} if action.get("skill") else {}
        return Message(
            role=Role.ROLE_USER, message_id=cue.message.message_id, context_id=cue.run_id or "",
            parts=parts, metadata=metadata,
        )  # fmt: skip

    async def _ask(self, cue: Cue, task: Task, asked: set[str]) -> None:
        """INPUT_REQUIRED: say the cue is blocked and ask an operator, once per question."""
        question = text_of(task.status.message) or "the agent needs input"
        key = task.status.message.message_id or question
        if key in asked:
            return
        asked.add(key)
        await cue.blocked(f"the remote agent asks: {question}")
        await cue.escalate(f"{ASKS_INPUT}:{task.id}", question)

    def _completed(self, cue: Cue, remote: Remote, task: Task) -> Result:
        names: list[str] = []
        context: dict[str, Any] = {}
        # each artifact is a context write of the run: a task of 6,000 empty ones (254 KiB)
        # made 6,000 in one go
        for artifact in task.artifacts[:ARTIFACTS_MAX]:
            name = artifact.name or artifact.artifact_id
            names.append(name)
            meta = {"task_id": task.id, "artifact_id": artifact.artifact_id, "agent": remote.url}
            if artifact.description:
                meta["description"] = artifact.description
            value = artifact_value(artifact)
            context[f"{cue.cue_id}.{name}"[:256]] = Entry(value, tags=["a2a"], metadata=meta)
        result: dict[str, Any] = {
            "task_id": task.id, "context_id": task.context_id, "state": "completed",
            "artifacts": names, "message": text_of(task.status.message),
        }  # fmt: skip
        if len(task.artifacts) > ARTIFACTS_MAX:
            result["artifacts_left_out"] = len(task.artifacts) - ARTIFACTS_MAX
        return Result(result=result, context=context)

    # -- answers, standdown -------------------------------------------------------------

    async def on_input(self, answer: TaskInput, message: Envelope) -> None:
        """An operator answered the remote agent's question: send it as the next message of
        the task, unless the task no longer waits (the answer went already)."""
        prefix, _, task_id = answer.cause.partition(":")
        if prefix != ASKS_INPUT or not task_id:
            raise Reject(f"not an answer to a remote agent's question: {answer.cause!r}")
        remote = self.remote(answer.action)
        task = await remote.get(task_id)
        if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            log.info("task %s is %s: answer %s not sent", task_id, state_name(task.status.state),
                     answer.escalation_id)  # fmt: skip
            return
        reply = Message(
            role=Role.ROLE_USER, task_id=task_id, context_id=task.context_id,
            message_id=str(uuid.uuid5(uuid.NAMESPACE_URL, message.message_id)),
            parts=[new_text_part(answer.answer)],
        )  # fmt: skip
        client = await remote.client(streaming=False)  # send, do not wait: the GO follows it
        async for _ in client.send_message(SendMessageRequest(message=reply)):
            break
        wake = self.wakes.get(task_id)
        if wake is not None:
            wake.set()

    async def standdown(self, cue: Cue, reason: str) -> None:
        """The cue is called off: cancel the remote task it started, if any."""
        task_id = cue.state.get("task_id") or await cue.recall(TASK)
        if not task_id:
            return
        try:
            task = await self.remote(cue.action).cancel(str(task_id))
            log.info("%r stood down (%s): remote task %s %s", cue, reason, task_id,
                     state_name(task.status.state))  # fmt: skip
        except A2AError as exc:
            log.info("%r stood down: remote task %s not cancelled: %s", cue, task_id, exc)
