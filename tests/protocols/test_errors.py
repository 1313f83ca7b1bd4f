"""Redis errors become protocols.errors in one place, by the code their reply starts with."""

from __future__ import annotations

import pytest
from redis import exceptions as rx

from protocols import errors as e
from protocols.transport._errors import translate, translated


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (rx.ResponseError("NOGROUP No such key 's' or consumer group 'g'"), e.GroupMissing),
        (rx.ResponseError("ERR The XREADGROUP stream key no longer exists"), e.GroupMissing),
        (rx.OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'."),
         e.OutOfMemory),
        (rx.ReadOnlyError("READONLY You can't write against a read only replica."), e.ReadOnly),
        (rx.ResponseError("STALE leader lease lost: state write refused"), e.StaleLeader),
        (rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
         e.TransportError),
        (rx.ConnectionError("Connection refused"), e.Unreachable),
        (rx.TimeoutError("Timeout reading from socket"), e.Unreachable),
        (ConnectionResetError("reset by peer"), e.Unreachable),
        (rx.AuthenticationError("invalid username-password pair"), e.TransportError),
        # redis-py's words for an error in a pipeline it raises for (a cluster's, say)
        (rx.ResponseError("Command # 1 (XPENDING s g) of pipeline caused error: "
                          "('NOGROUP No such key \\'s\\' or consumer group \\'g\\'',)"),
         e.GroupMissing),
        (rx.ResponseError('Command # 2 (EVALSHA x 1 k) of pipeline caused error: '
                          '("STALE leader lease lost",)'), e.StaleLeader),
    ],
)  # fmt: skip
def test_each_error_gets_its_class(raised: Exception, expected: type[e.CallboardError]) -> None:
    mapped = translate(raised, "OP")
    assert type(mapped) is expected
    assert str(mapped).startswith("OP: ")


def test_translated_raises_the_class_and_keeps_the_cause() -> None:
    cause = rx.ResponseError("STALE leader lease lost")
    with pytest.raises(e.StaleLeader) as caught, translated("EVALSHA"):
        raise cause
    assert caught.value.__cause__ is cause


def test_other_errors_pass_through_untouched() -> None:
    with pytest.raises(KeyError), translated("OP"):
        raise KeyError("not a Redis error")
    assert translate(ValueError("x"), "OP") is None


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        # redis-py strips these codes into classes of its own
        (rx.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), e.OutOfMemory),
        (rx.ReadOnlyError("You can't write against a read only replica."), e.ReadOnly),
        (rx.ResponseError("UNBLOCKED force unblock ... (master -> replica?)"), e.ReadOnly),
        (rx.ResponseError("UNBLOCKED client unblocked via CLIENT UNBLOCK"), e.TransportError),
    ],
)
def test_refused_writes_get_their_class(
    raised: Exception, expected: type[e.CallboardError]
) -> None:
    mapped = translate(raised, "OP")
    assert type(mapped) is expected
    if expected is e.OutOfMemory:
        assert "Redis is out of memory" in str(mapped)


class _FullThenFreed:
    """A client whose writes were refused (OOM) and whose INFO now shows room: memory
    hovering at the limit, as Redis under `noeviction` does while keys expire."""

    async def set(self, *args: object) -> None:
        raise rx.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")

    async def info(self, *sections: str) -> dict[str, object]:
        return {"role": "master", "maxmemory": 0, "used_memory": 1}


async def test_a_write_refused_lately_is_still_the_reason_given() -> None:
    from protocols.transport import Gateway

    gateway = Gateway(_FullThenFreed(), retry_s=0)  # type: ignore[arg-type]
    assert await gateway.write_refusal() is None  # nothing refused yet
    with pytest.raises(e.OutOfMemory):
        await gateway._call("SET", lambda: gateway._client.set("k", "v"))
    refusal = await gateway.write_refusal()
    assert isinstance(refusal, e.OutOfMemory) and "s ago)" in str(refusal)
