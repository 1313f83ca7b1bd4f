"""Page latency of the calling desk at the issue's sizes: a board over 1,000 runs and a run
of 500 cues, each page asked for many times, beside the JSON API routes the same data comes
from (measured in the same run, on the same hub).

A real hub process on its own server and prefix; runs are started through the API (dry runs
walk the whole cuelist at once; the runs of `bench-gate` hold at a manual cue, so the
"needs you" inbox has work in it). Target: every page under 200 ms at p99.

    python bench/desk.py [--runs 1000] [--cues 500] [-n 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from callboard.embedded import EmbeddedServer
from tests.e2e.procs import child_env, processes, wait_done

TARGET_MS = 200.0
SMALL = """
cuelist: bench-small
cues:
  - {id: BUILD-100, target_agents: [bench-a], auto_follow: TEST-200}
  - {id: TEST-200, target_agents: [bench-b]}
  - {id: LINT-210, target_agents: [bench-b], depends_on: [BUILD-100]}
  - {id: PACK-300, target_agents: [bench-a], depends_on: [TEST-200, LINT-210]}
  - id: SHIP-400
    target_agents: [bench-c]
    depends_on: [PACK-300]
    conditions: [approval_received]
"""
GATE = """
cuelist: bench-gate
cues:
  - {id: GATE-100, target_agents: [bench-a], manual: true}
  - {id: AFTER-200, target_agents: [bench-b], depends_on: [GATE-100]}
"""


def big_cuelist(cues: int, width: int = 10) -> str:
    """`cues` cues in layers of `width`, each depending on two cues of the layer before,
    every tenth one auto-following its neighbour; a few compete for a resource."""
    lines = ["cuelist: bench-big", "conflict_strategy: priority", "cues:"]
    for i in range(cues):
        layer, slot = divmod(i, width)
        deps = sorted({(layer - 1) * width + slot, (layer - 1) * width + (slot + 3) % width})
        deps_text = f", depends_on: [{', '.join(f'C{d:04d}' for d in deps)}]" if layer else ""
        extra = ", resources: [runner]" if slot == 0 and layer % 5 == 0 else ""
        lines.append(f"  - {{id: C{i:04d}, target_agents: [bench-{slot % 4}]{deps_text}{extra}}}")
    return "\n".join(lines) + "\n"


def submit(api: httpx.Client, text: str) -> None:
    r = api.post("/v1/cuelists", content=text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text


def start(api: httpx.Client, cuelist: str, dry: bool) -> str:
    r = api.post("/v1/runs", json={"cuelist": cuelist, "dry": dry})
    assert r.status_code == 201, r.text
    run_id: str = r.json()["run_id"]
    return run_id


def measure(api: httpx.Client, path: str, n: int) -> list[float]:
    api.get(path).raise_for_status()  # warm: templates compiled, layouts cached
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = api.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--cues", type=int, default=500)
    parser.add_argument("-n", type=int, default=40, help="requests per page")
    args = parser.parse_args()
    with EmbeddedServer() as server, processes(child_env(server), Path(tempfile.mkdtemp())) as p:
        url = p.hub()
        with httpx.Client(base_url=url, timeout=60) as api:
            for text in (SMALL, GATE, big_cuelist(args.cues)):
                submit(api, text)
            t0 = time.perf_counter()
            gated = max(1, args.runs // 10)
            for i in range(args.runs - 1):
                start(api, "bench-gate" if i < gated else "bench-small", dry=i >= gated)
            big = start(api, "bench-big", dry=True)
            wait_done(api, big, timeout_s=120)
            print(f"set up {args.runs} runs ({gated - 0} holding at a manual cue) and a "
                  f"{args.cues}-cue run in {time.perf_counter() - t0:.1f}s")  # fmt: skip
            pages = [
                ("board, newest 50 of all runs", "/"),
                ("board, filtered by status", "/?status=dry&page=3"),
                ("board, filtered by cuelist", "/?cuelist=bench-small&page=10"),
                ("board refresh (parts)", "/board/parts"),
                (f"run page, {args.cues} cues", f"/runs/{big}"),
                (f"run refresh, every row of {args.cues}", f"/runs/{big}/parts?cues=*"),
                ("run refresh, 3 changed rows", f"/runs/{big}/parts?cues=C0001,C0002,C0003"),
                ("cuelists", "/cuelists"),
                (f"cuelist page, {args.cues} cues", "/cuelists/bench-big"),
                ("agents and wiring map", "/agents"),
                ("escalations", "/escalations"),
                ("dead letters", "/deadletters"),
            ]
            baselines = [
                ("API GET /v1/runs (100)", "/v1/runs"),
                (f"API GET /v1/runs/{{id}}, {args.cues} cues", f"/v1/runs/{big}"),
                ("API GET /healthz", "/healthz"),
            ]
            print(f"\n{'request':44} {'p50 ms':>8} {'p99 ms':>8}  (n={args.n})")
            worst = 0.0
            for title, path in pages + baselines:
                times = measure(api, path, args.n)
                p50, p99 = statistics.median(times), pct(times, 0.99)
                page = (title, path) in pages
                worst = max(worst, p99) if page else worst
                flag = "" if not page else ("  ok" if p99 <= TARGET_MS else "  OVER")
                print(f"{title:44} {p50:8.1f} {p99:8.1f}{flag}")
            verdict = "within" if worst <= TARGET_MS else "OVER"
            print(f"\nslowest page p99: {worst:.1f} ms ({verdict} the {TARGET_MS:.0f} ms target)")


if __name__ == "__main__":
    main()
