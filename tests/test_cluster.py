"""`callboard up`'s guards, without processes: its own hub only, a locked data folder,
a taken port, log names."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from callboard.client import Client
from callboard.cluster import DataDir, UpError, log_name, port_taken, wait_for_own_hub


def client_answering(status: int, body: Any) -> Client:
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/healthz"  # nothing but the identity check is sent
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return Client("http://127.0.0.1:1", transport=httpx.MockTransport(handle))


def health(hub_id: str, status: str = "ok") -> dict[str, Any]:
    return {"status": status, "hub_id": hub_id, "leader": True, "redis": status == "ok"}


def test_only_the_hub_up_started_is_accepted() -> None:
    wait_for_own_hub(client_answering(200, health("up-mine")), "up-mine", lambda: True, 1)
    with pytest.raises(UpError, match="answers as hub 'up-theirs', not the hub this `up`"):
        wait_for_own_hub(client_answering(200, health("up-theirs")), "up-mine", lambda: True, 1)
    with pytest.raises(UpError, match="not a callboard hub"):
        wait_for_own_hub(client_answering(200, "<html>hello</html>"), "up-mine", lambda: True, 1)
    with pytest.raises(UpError, match="not a callboard hub"):
        wait_for_own_hub(client_answering(404, {"detail": "no"}), "up-mine", lambda: True, 1)
    with pytest.raises(UpError, match="exited while starting"):
        wait_for_own_hub(client_answering(200, health("up-mine")), "up-mine", lambda: False, 1)


def test_own_hub_still_starting_is_waited_for() -> None:
    answers = iter([(503, health("up-mine", "unavailable"))] * 3 + [(200, health("up-mine"))])
    seen = []

    def handle(request: httpx.Request) -> httpx.Response:
        status, body = next(answers)
        seen.append(status)
        return httpx.Response(status, json=body)

    client = Client("http://127.0.0.1:1", transport=httpx.MockTransport(handle))
    wait_for_own_hub(client, "up-mine", lambda: True, 10)
    assert seen == [503, 503, 503, 200]


def test_the_data_folder_is_held_by_one_up(tmp_path: Path) -> None:
    first = DataDir(tmp_path / "data").lock()
    with pytest.raises(UpError, match=r"in use by another callboard up \(pid \d+\)"):
        DataDir(tmp_path / "data").lock()
    first.unlock()
    DataDir(tmp_path / "data").lock().unlock()  # free again once the first let go
    assert (tmp_path / "data" / "redis").is_dir() and (tmp_path / "data" / "logs").is_dir()


def test_a_listening_port_is_taken() -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
        assert port_taken(port)
    assert not port_taken(port)


def test_log_names() -> None:
    assert log_name("specialist-build") == "specialist-build"
    assert log_name("hub") == "specialist-hub"
