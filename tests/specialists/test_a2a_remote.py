"""The `a2a` specialist's view of a task: stream events merged into the task, parts as JSON."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from a2a.helpers import new_data_part, new_text_part
from a2a.types import (
    Artifact,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from protocols.codec import DEFAULT_MAX_MESSAGE_BYTES
from specialists.builtin.a2a import A2A, ARTIFACTS_MAX
from specialists.builtin.a2a_remote import (
    Following,
    Remote,
    artifact_value,
    part_value,
    state_name,
)
from specialists.cue import Cue


def test_events_before_the_task_wait_for_it_then_merge_in_order() -> None:
    working = StreamResponse(
        status_update=TaskStatusUpdateEvent(
            task_id="t", status=TaskStatus(state=TaskState.TASK_STATE_WORKING)
        )
    )
    following = Following(DEFAULT_MAX_MESSAGE_BYTES)
    assert following.merge(working) is None
    task = following.merge(StreamResponse(task=Task(id="t", context_id="c")))
    assert task is not None and task.id == "t"
    task = following.merge(working)
    assert task is not None and task.status.state == TaskState.TASK_STATE_WORKING
    chunk = Artifact(artifact_id="a", name="log", parts=[new_text_part("one ")])
    task = following.merge(StreamResponse(artifact_update=TaskArtifactUpdateEvent(artifact=chunk)))
    more = Artifact(artifact_id="a", parts=[new_text_part("two")])
    update = TaskArtifactUpdateEvent(artifact=more, append=True)
    task = following.merge(StreamResponse(artifact_update=update))
    assert task is not None and len(task.artifacts) == 1
    assert artifact_value(task.artifacts[0]) == ["one ", "two"]


def test_parts_as_json() -> None:
    assert part_value(new_text_part("hi")) == "hi"
    assert part_value(new_data_part({"n": 3, "x": 0.5, "l": [1, 2.0]})) == {
        "n": 3,
        "x": 0.5,
        "l": [1, 2],
    }  # protobuf keeps numbers as doubles: whole ones come back as ints
    assert part_value(Part(url="https://x.test/a.png", media_type="image/png")) == {
        "url": "https://x.test/a.png",
        "media_type": "image/png",
    }
    assert part_value(Part(raw=b"12345", filename="a.bin")) == {"filename": "a.bin", "size": 5}
    assert state_name(TaskState.TASK_STATE_INPUT_REQUIRED) == "input_required"


def test_a_completed_task_gives_the_run_at_most_64_artifacts() -> None:
    """Each artifact is a context write of the run: 6,000 empty ones made 6,000 at once."""
    many = [Artifact(artifact_id=f"a{i}", name=f"n{i}") for i in range(100)]
    task = Task(id="t", context_id="c", artifacts=many)
    cue, remote = SimpleNamespace(cue_id="CUE"), SimpleNamespace(url="http://agent")
    result = A2A._completed(cast(A2A, None), cast(Cue, cue), cast(Remote, remote), task)
    assert len(result.context) == ARTIFACTS_MAX == 64
    assert result.result["artifacts_left_out"] == 36
    assert list(result.context)[-1] == "CUE.n63"
