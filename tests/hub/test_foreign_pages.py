"""Pages of other origins against a hub without an API key (a real hub process): a request
whose Host is not a loopback name (DNS rebinding: evil.example re-pointed at 127.0.0.1) is
refused, reads included, and a browser's write from another origin of the same site
(another port of 127.0.0.1, "same-site") is refused as a cross-site one is. A review made
both work in Chromium before: a rebound page read the runs and gave GO, and a form on
another local port gave GO."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes

pytestmark = pytest.mark.redis
GATED = "cuelist: foreign\ncues:\n  - {id: GATE, target_agents: [nobody], manual: true}\n"


@pytest.fixture(scope="module")
def hub_url(
    redis_server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with processes(child_env(redis_server), tmp_path_factory.mktemp("foreign")) as procs:
        yield procs.hub()


def test_only_loopback_names_are_answered(hub_url: str) -> None:
    port = httpx.URL(hub_url).port
    with httpx.Client(base_url=hub_url) as client:
        for host in ("evil.example", "rebind.test", "127.0.0.1.evil.example", "10.0.0.1"):
            for path in ("/v1/runs", "/", "/healthz", "/a2a/jsonrpc", "/mcp"):
                r = client.get(path, headers={"Host": f"{host}:{port}"})
                assert r.status_code == 421, (host, path, r.status_code)
                assert "loopback" in r.json()["detail"], r.text
        for host in ("127.0.0.1", "localhost", "LOCALHOST", "127.0.0.2", "[::1]"):
            r = client.get("/v1/runs", headers={"Host": f"{host}:{port}"})
            assert r.status_code == 200, (host, r.text)


@pytest.mark.parametrize("site", ["same-site", "cross-site"])
def test_a_write_from_another_origin_is_refused(hub_url: str, site: str) -> None:
    with httpx.Client(base_url=hub_url) as client:
        r = client.post("/v1/cuelists", content=GATED, headers={"Content-Type": "text/yaml"})
        assert r.status_code in (200, 201), r.text
        r = client.post("/v1/runs", json={"cuelist": "foreign"})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        # what Chromium sends for a form on http://127.0.0.1:<another port> posting here
        r = client.post(f"/v1/runs/{run_id}/cancel", headers={"Sec-Fetch-Site": site})
        assert r.status_code == 403 and site in r.json()["detail"], r.text
        assert client.get(f"/v1/runs/{run_id}").json()["status"] != "cancelled"
        # the desk's own page (same-origin), a typed URL (none) and a client that is no
        # browser (no header) still may
        r = client.post(f"/v1/runs/{run_id}/cancel", headers={"Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200, r.text
