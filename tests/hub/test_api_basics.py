"""The REST API without cuelists: auth, body limit, JSON errors, health, metrics, broadcasts."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from protocols.messages import MessageType
from tests.e2e.procs import child_env, processes

KEY = "test-key-0123456789"
pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def hub_url(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    env = child_env(redis_server, CALLBOARD_API_KEY=KEY)
    with processes(env, tmp_path_factory.mktemp("basics")) as procs:
        yield procs.hub()


@pytest.fixture
def api(hub_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hub_url, headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield client


def test_healthz_needs_no_key(hub_url: str) -> None:
    r = httpx.get(f"{hub_url}/healthz")
    assert r.status_code == 200
    assert r.json()["redis"] is True and r.json()["leader"] is True
    assert r.json()["leader_id"] == r.json()["hub_id"] and r.json()["reasons"] == []


@pytest.mark.parametrize("path", ["/v1/runs", "/v1/agents", "/metrics", "/v1/wiring"])
@pytest.mark.parametrize("header", [None, "Bearer wrong", "Basic abc", f"bearer {KEY}x"])
def test_401_without_the_key(hub_url: str, path: str, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    r = httpx.get(f"{hub_url}{path}", headers=headers)
    assert r.status_code == 401
    assert "detail" in r.json()
    assert r.headers["www-authenticate"] == "Bearer"


def test_openapi_docs(api: httpx.Client) -> None:
    assert api.get("/docs").status_code == 200
    paths = api.get("/openapi.json").json()["paths"]
    assert "/v1/runs/{run_id}/cues/{cue_id}/go" in paths
    assert "application/yaml" in paths["/v1/cuelists"]["post"]["requestBody"]["content"]


def test_413_by_content_length(api: httpx.Client) -> None:
    r = api.post("/v1/cuelists", content=b"x" * (1024 * 1024 + 1))
    assert r.status_code == 413
    assert "limit" in r.json()["detail"]


def test_413_while_streaming_a_chunked_body(api: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b"y" * 65536

    for path, media in [("/v1/runs", "application/json"), ("/v1/cuelists", "application/yaml")]:
        r = api.post(path, content=chunks(), headers={"Content-Type": media})
        assert r.status_code == 413, r.text
        assert "limit" in r.json()["detail"]


def test_bad_json_is_a_422_with_detail(api: httpx.Client) -> None:
    r = api.post("/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert isinstance(r.json()["detail"], str)
    r = api.post("/v1/runs", json={"cuelist": "x", "surprise": 1})
    assert r.status_code == 422
    assert any(e["key"] == "surprise" for e in r.json()["errors"])


def test_unknowns_are_404(api: httpx.Client) -> None:
    for method, path in [
        ("GET", "/v1/runs/nope"),
        ("GET", "/v1/runs/nope/context"),
        ("GET", "/v1/runs/nope/events"),
        ("POST", "/v1/runs/nope/cues/CUE-1/go"),
        ("POST", "/v1/runs/nope/cancel"),
        ("GET", "/v1/cuelists/nope"),
        ("POST", "/v1/escalations/nope/resolve"),
        ("GET", "/v1/nothing-here"),
    ]:
        r = api.request(method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["detail"]
    r = api.post("/v1/runs", json={"cuelist": "no-such-cuelist"})
    assert r.status_code == 404


def test_wrong_media_type_is_415(api: httpx.Client) -> None:
    r = api.post("/v1/cuelists", content=b"<x/>", headers={"Content-Type": "application/xml"})
    assert r.status_code == 415
    assert "detail" in r.json()


def test_broadcasts(api: httpx.Client) -> None:
    notice = MessageType.BROADCAST_NOTICE.value
    r = api.post("/v1/broadcasts", json={"message_type": notice, "payload": {"text": "hi"}})
    assert r.status_code == 202, r.text
    assert r.json() == {"sent": notice}
    r = api.post("/v1/broadcasts", json={"message_type": MessageType.COORD_GO.value})
    assert r.status_code == 422
    assert r.json()["errors"][0]["key"] == "message_type"
    r = api.post("/v1/broadcasts", json={"message_type": notice, "payload": {"txt": 1}})
    assert r.status_code == 422
    assert any(e["key"].startswith("payload") for e in r.json()["errors"])


def test_metrics_and_wiring(api: httpx.Client) -> None:
    r = api.get("/metrics")
    assert r.status_code == 200
    assert "callboard_leader 1.0" in r.text
    wiring = api.get("/v1/wiring").json()
    types = {t["type"]: t for t in wiring["message_types"]}
    assert types[MessageType.COORD_GO.value]["senders"] == ["hub"]
    assert types[MessageType.ACK_STANDBY.value]["readers"] == ["hub"]
    text = api.get("/v1/wiring", params={"format": "mermaid"}).text
    assert text.startswith("flowchart LR")
    assert api.get("/v1/wiring", params={"format": "svg"}).status_code == 422


def test_lists_start_empty(api: httpx.Client) -> None:
    for path in ("/v1/runs", "/v1/escalations", "/v1/deadletters", "/v1/cuelists"):
        body = api.get(path).json()
        assert body["count"] == len(body["data"])


def test_hub_refuses_to_listen_beyond_loopback_without_a_key(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": "redis://127.0.0.1:1/0"}
    argv = [sys.executable, "-m", "hub.main", "--host", "0.0.0.0", "--port", "1"]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, cwd=tmp_path.parent)
    assert done.returncode == 2
    assert b"CALLBOARD_API_KEY" in done.stderr


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"CALLBOARD_LEASE_MS": "soon"}, b"lease_ms"),
        ({"CALLBOARD_TRACING": "1", "OTEL_TRACES_SAMPLER": "sometimes"}, b"OTEL_TRACES_SAMPLER"),
        ({"CALLBOARD_TRACING": "1", "OTEL_TRACES_EXPORTER": "jaeger"}, b"OTEL_TRACES_EXPORTER"),
    ],
)
def test_a_setting_the_hub_cannot_run_with_is_one_line_not_a_traceback(
    setting: dict[str, str], named: bytes, tmp_path: Path
) -> None:
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": "redis://127.0.0.1:1/0", **setting}
    argv = [sys.executable, "-m", "hub.main", "--port", "1"]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, cwd=tmp_path.parent)
    assert done.returncode == 2
    assert done.stderr.startswith(b"error: ") and named in done.stderr
    assert b"Traceback" not in done.stderr


def test_503_json_when_redis_is_gone(tmp_path: Path) -> None:
    with EmbeddedServer() as server, processes(child_env(server), tmp_path) as procs:
        url = procs.hub()
        server.stop()
        r = httpx.get(f"{url}/healthz", timeout=30)
        assert r.status_code == 503 and r.json()["redis"] is False
        r = httpx.get(f"{url}/v1/runs", timeout=30)
        assert r.status_code == 503, r.text
        assert "detail" in r.json()


def test_sigterm_stops_the_hub_cleanly(redis_server: EmbeddedServer, tmp_path: Path) -> None:
    with processes(child_env(redis_server), tmp_path) as procs:
        url = procs.hub()
        hub = procs.procs[0]
        with httpx.stream("GET", f"{url}/healthz") as r:
            assert r.status_code == 200
        hub.send_signal(signal.SIGTERM)
        assert hub.wait(15) == 0
        assert "Application shutdown complete" in procs.log(f"hub-{urlsplit(url).port}")
