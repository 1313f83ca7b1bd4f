"""Row 14: a hostile specialist with only its own ACL credentials tries every harm of issue
12, items 1-5, against a real Redis loaded with `callboard acl`'s file, a real hub (as the
hub user) and honest echo specialists running a cuelist over and over (each as its own
user). The attacker is a process of its own (tests/faults/hostile.py) that is also a target
of one cue of a shared run, so it has cues of its own to reach from.

Three promises, measured in one scenario:
- attacks: nothing outside its own cues changes (other runs succeed with their context
  intact and attributed, no pause, every escalation it caused names it, dead letters
  neither forged nor wiped, the shared run's header small after 20,000 stray completions);
- speed: the honest runs finish within 2x of their time without the attacker;
- flood: while it floods 100,000 entries naming made-up run ids, Redis grows by no more
  than its own out stream plus a fixed allowance, and the hub's RSS by a fixed bound.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import typer
from typer.testing import CliRunner

from callboard.acl import acl
from callboard.embedded import EmbeddedServer
from protocols.keys import Keys
from tests.e2e.procs import Procs, child_env, wait_done, wait_online
from tests.faults.conftest import Figure
from tests.faults.tools import rss_kib, start, submit
from tests.helpers import eventually_sync

pytestmark = pytest.mark.slow

BUILD, TEST, EVIL = "fx-h-build", "fx-h-test", "fx-evil"
PASSWORDS = {"hub": "hub-secret", BUILD: "b-secret", TEST: "t-secret", EVIL: "evil-secret"}
K = Keys()
FLOOD = 100_000
STRAY = 20_000
BASELINE_RUNS = 8
REDIS_ALLOWANCE_MIB = 24  # Redis growth beyond the attacker's own out stream, at most
HUB_RSS_MIB = 64  # hub RSS growth during the flood, at most
HONEST = {
    "cuelist": "fx-honest",
    "cues": [
        {"id": "BUILD", "target_agents": [BUILD], "auto_follow": "TEST",
         "action": {"execute_ms": 100, "context": {"built": True}}},
        {"id": "TEST", "target_agents": [TEST], "auto_follow": "SHIP",
         "action": {"execute_ms": 100}},
        {"id": "SHIP", "target_agents": [BUILD, TEST], "action": {"execute_ms": 50}},
    ],
}  # fmt: skip
SHARED = {
    "cuelist": "fx-shared",
    "cues": [
        {"id": "SB", "target_agents": [BUILD], "auto_follow": "SE",
         "action": {"context": {"artifact": "app.tar"}}},
        # the attacker's own; its rejection of its WARNING fails that attempt at once, and
        # the retries keep the run open to the 20,000 stray completions that follow
        {"id": "SE", "target_agents": [EVIL], "ack_timeout_s": 600, "retries": 3},
    ],
}  # fmt: skip


@dataclass
class Scenario:
    baseline_s: list[float] = field(default_factory=list)
    during: list[dict[str, Any]] = field(default_factory=list)  # runs that overlapped it
    after: list[dict[str, Any]] = field(default_factory=list)
    honest_runs: list[dict[str, Any]] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)  # the attacker's, per phase
    shared: dict[str, Any] = field(default_factory=dict)
    shared_context: dict[str, Any] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    escalations: list[dict[str, Any]] = field(default_factory=list)
    letters: list[dict[str, Any]] = field(default_factory=list)
    honest_letter: str = ""
    paused: bytes | None = None
    broadcast_types: list[str] = field(default_factory=list)
    header_bytes: int = 0
    mem: dict[str, float] = field(default_factory=dict)
    deadletters_page_bytes: int = 0
    hub_alive: bool = False
    same_hub: bool = False
    seconds: dict[str, float] = field(default_factory=dict)


def _url(server: EmbeddedServer, user: str) -> str:
    return f"redis://{user}:{PASSWORDS[user]}@127.0.0.1:{server.port}/0"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    out = tmp_path_factory.mktemp("acl") / "users.acl"
    app = typer.Typer()
    app.command()(acl)
    args = [BUILD, TEST, EVIL, "--out", str(out), "--hub-password", PASSWORDS["hub"]]
    for agent in (BUILD, TEST, EVIL):
        args += ["--password", f"{agent}={PASSWORDS[agent]}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with EmbeddedServer(aclfile=str(out)) as embedded:
        yield embedded


class HonestLoop(threading.Thread):
    """Runs the honest cuelist one run after another, recording each run's span."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.runs: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=30) as api:
                while not self.stop.is_set():
                    began = time.monotonic()
                    run = wait_done(api, start(api, "fx-honest"), timeout_s=60)
                    self.runs.append({**run, "t0": began, "t1": time.monotonic()})
        except BaseException as exc:  # surfaced by the test
            self.error = exc


class Sampler(threading.Thread):
    """Redis used_memory (and the part of it that is not the stream `own`) and the hub's
    RSS, every 50 ms: the peaks of a phase."""

    def __init__(self, r: redis.Redis, hub_pid: int, own: str) -> None:
        super().__init__(daemon=True)
        self.r, self.pid, self.own = r, hub_pid, own
        self.stop = threading.Event()
        self.redis_peak = self.beyond_peak = self.rss_peak = 0

    def run(self) -> None:
        while not self.stop.wait(0.05):
            used, own = _used_and_stream(self.r, self.own)
            self.redis_peak = max(self.redis_peak, used)
            self.beyond_peak = max(self.beyond_peak, used - own)
            self.rss_peak = max(self.rss_peak, rss_kib(self.pid) * 1024)


def _used_and_stream(r: redis.Redis, stream: str) -> tuple[int, int]:
    """Redis used_memory and the memory of `stream`, read at one instant (MULTI): the
    hub trims the stream as it goes, so the two read apart would not add up."""
    with r.pipeline(transaction=True) as pipe:
        pipe.info("memory")
        pipe.memory_usage(stream, samples=0)
        info, own = pipe.execute()
    return int(info["used_memory"]), int(own or 0)


def _drained(r: redis.Redis, stream: str) -> bool:
    """The hub has read and acknowledged every entry of `stream`."""
    info = r.xinfo_stream(stream)
    groups = r.xinfo_groups(stream)
    last = info["last-generated-id"]
    return any(g["name"] == b"hub" and g["last-delivered-id"] == last and g["pending"] == 0
               for g in groups)  # fmt: skip


def _attacker(procs: Procs, phase: str, url: str, server: EmbeddedServer, tmp: Path) -> Any:
    report = tmp / f"{phase}.json"
    argv = [
        sys.executable,
        "-m",
        "tests.faults.hostile",
        phase,
        "--agent",
        EVIL,
        "--victim",
        BUILD,
        "--api",
        url,
        "--flood",
        str(FLOOD),
        "--report",
        str(report),
    ]
    proc = procs.spawn(f"attacker-{phase}", argv, REDIS_URL=_url(server, EVIL))  # fmt: skip
    assert proc.wait(240) == 0, procs.log(f"attacker-{phase}")
    return json.loads(report.read_text())


@pytest.fixture(scope="module")
def scenario(
    server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    tmp = tmp_path_factory.mktemp("hostile")
    s = Scenario()
    env = child_env(server, prefix=K.prefix)
    procs = Procs(env, tmp)
    r = redis.Redis.from_url(_url(server, "hub"))  # the test looks as the hub user
    try:
        url = procs.hub(REDIS_URL=_url(server, "hub"))
        hub_proc = procs.procs[-1]
        for agent in (BUILD, TEST):
            procs.echo(agent, REDIS_URL=_url(server, agent))
        api = httpx.Client(base_url=url, timeout=30)
        hub_id = api.get("/healthz").json()["hub_id"]
        wait_online(api, [BUILD, TEST])
        submit(api, HONEST)
        submit(api, SHARED)
        # an honest dead letter from before the attack: it must survive it, unforged
        r.xadd(K.inbox(TEST), {"m": b"{honest garbage"})
        s.honest_letter = eventually_sync(
            lambda: [d for d in api.get("/v1/deadletters").json()["data"]], 20
        )[0]["id"]

        for _ in range(BASELINE_RUNS):  # the honest runs' time without the attacker
            s.baseline_s.append(wait_done(api, start(api, "fx-honest"))["record"]["duration_s"])
        shared_id = start(api, "fx-shared")
        eventually_sync(lambda: api.get(f"/v1/runs/{shared_id}").json()["cues"]["SE"]["state"]
                        == "warning", 20)  # fmt: skip

        loop = HonestLoop(url)
        loop.start()
        eventually_sync(lambda: loop.runs, 30)
        attack_t0 = time.monotonic()
        s.report["attack"] = _attacker(procs, "attack", url, server, tmp)
        eventually_sync(lambda: _drained(r, K.out(EVIL)), 120, interval_s=0.1)
        s.seconds["attack"] = time.monotonic() - attack_t0

        # the flood, with Redis memory and the hub's RSS sampled throughout
        time.sleep(0.5)  # let the allocator settle after the attack phase (a baseline only)
        before_redis, before_stream = _used_and_stream(r, K.out(EVIL))
        before_rss = rss_kib(hub_proc.pid) * 1024
        before_audit = int(r.memory_usage(K.audit, samples=0) or 0)
        sampler = Sampler(r, hub_proc.pid, K.out(EVIL))
        sampler.start()
        flood_t0 = time.monotonic()
        s.report["flood"] = _attacker(procs, "flood", url, server, tmp)
        eventually_sync(lambda: _drained(r, K.out(EVIL)), 180, interval_s=0.1)
        s.seconds["flood"] = time.monotonic() - flood_t0
        sampler.stop.set()
        sampler.join()
        s.mem = {
            "redis_growth": (sampler.redis_peak - before_redis) / 2**20,
            # at the peak of everything but its own stream, as that stream was then
            "beyond": (sampler.beyond_peak - (before_redis - before_stream)) / 2**20,
            "audit": (int(r.memory_usage(K.audit, samples=0) or 0) - before_audit) / 2**20,
            "rss_before": before_rss / 2**20,
            "rss_peak": sampler.rss_peak / 2**20,
        }

        s.report["big"] = _attacker(procs, "big", url, server, tmp)
        eventually_sync(lambda: _drained(r, K.out(EVIL)), 120, interval_s=0.1)
        s.deadletters_page_bytes = len(api.get("/v1/deadletters").content)
        s.report["last"] = _attacker(procs, "last", url, server, tmp)
        eventually_sync(lambda: _drained(r, K.out(EVIL)), 60, interval_s=0.1)
        attack_t1 = time.monotonic()
        s.seconds["total"] = attack_t1 - attack_t0

        settled = len(loop.runs)  # a few honest runs after it all, then stop
        eventually_sync(lambda: len(loop.runs) >= settled + 3 or loop.error, 60)
        loop.stop.set()
        loop.join(60)
        assert loop.error is None, loop.error
        s.honest_runs = loop.runs
        s.during = [x for x in loop.runs if x["t1"] > attack_t0 and x["t0"] < attack_t1]
        s.after = [x for x in loop.runs if x["t0"] >= attack_t1]

        s.shared = api.get(f"/v1/runs/{shared_id}").json()
        s.shared_context = api.get(f"/v1/runs/{shared_id}/context").json()["entries"]
        s.header_bytes = int(r.hstrlen(K.run(shared_id), "h"))
        for run in s.honest_runs:
            entries = api.get(f"/v1/runs/{run['run_id']}/context").json()["entries"]
            s.contexts[run["run_id"]] = entries
        s.escalations = api.get("/v1/escalations", params={"limit": 1000}).json()["data"]
        s.letters = [
            {k.decode(): v.decode(errors="replace") for k, v in f.items() if k != b"raw"}
            | {"id": i.decode()}
            for i, f in r.xrange(K.dead)
        ]
        s.paused = r.get(K.paused)
        s.broadcast_types = [
            json.loads(f[b"m"])["message_type"] for _, f in r.xrange(K.broadcast) if b"m" in f
        ]
        api.post(f"/v1/runs/{shared_id}/cancel")
        s.hub_alive = hub_proc.poll() is None and api.get("/healthz").status_code == 200
        s.same_hub = api.get("/healthz").json()["hub_id"] == hub_id
        api.close()
        yield s
    finally:
        procs.stop()
        r.close()


def test_a_hostile_specialist_changes_nothing_outside_its_own_cues(
    scenario: Scenario, figure: Figure
) -> None:
    s = scenario
    probes = s.report["attack"]
    allowed = probes["allowed"]
    honest_ids = {x["run_id"] for x in s.honest_runs}
    statuses = {x["status"] for x in s.honest_runs}
    bad_context = [
        (run_id, key, e) for run_id, entries in s.contexts.items() for key, e in entries.items()
        if e["source"] != BUILD or key != "built" or e["value"] is not True
    ]  # fmt: skip
    missing_context = [run_id for run_id, entries in s.contexts.items() if "built" not in entries]
    on_honest = [e for e in s.escalations if e["run_id"] in honest_ids]
    by_attacker = [e for e in s.escalations if e["raised_by"] == EVIL]
    violations = [e for e in s.escalations if e["type"] == "escalation.protocol_violation"]
    unnamed = [e for e in violations if e["payload"].get("sender") not in (EVIL, TEST)]
    hub_raised_not_violation = [
        e for e in s.escalations if e["raised_by"] == "hub" and e not in violations
    ]
    forged = [
        d for d in s.letters if d.get("sender") in (BUILD, TEST) and d["id"] != s.honest_letter
    ]
    evil_letters = [d for d in s.letters if d.get("sender") == EVIL]
    rejected = [d for d in evil_letters if d["reason"].startswith(f"rejected by {EVIL}: ")]
    doubled = [d for d in evil_letters if "unexpected fields ['m']" in d["reason"]]
    shared_ctx = {k: (e["value"], e["source"]) for k, e in s.shared_context.items()}
    record = s.shared["record"]
    figure(
        row=14,
        phase="attacks",
        fault="a specialist with only its own ACL credentials (a process of its own) tries "
        "items 1-5 of issue 12 while honest specialists run a cuelist over and over",
        promise="nothing outside its own cues changes: ACL refuses every write to streams the "
        "hub writes; other runs succeed, context intact and attributed; no pause; every "
        "escalation it caused names it; dead letters not forged or wiped; run headers small",
        measured=f"{len(probes['refused'])}/{len(probes['refused']) + len(allowed)} writes "
        f"refused (NOPERM), allowed: {allowed or 'none'}; {probes['sent']:,} hostile "
        f"messages ({STRAY:,} stray completions among them); honest runs {len(s.honest_runs)} all "
        f"{'/'.join(sorted(statuses))}, context of each as written by {BUILD}: "
        f"{not bad_context and not missing_context}; escalations on honest runs: "
        f"{len(on_honest)}; its own {len(by_attacker)} (severity "
        f"{sorted({e['severity'] for e in by_attacker})}); violations {len(violations)} "
        f"slots, {sum(e['count'] for e in violations):,} counted, all naming it: "
        f"{not unnamed}; paused: {s.paused is not None}; dead letters: the honest one kept, "
        f"{len(forged)} forged, {len(evil_letters)} of its own ({len(rejected)} it asked "
        f"for, once; {len(doubled)} naming its field twice); shared run header "
        f"{s.header_bytes:,} B, {record['protocol_violations']:,} violations counted, "
        f"{len(record['errors'])} errors kept; hub restarted: {not s.same_hub}",
    )
    assert allowed == [], allowed
    assert len(probes["refused"]) >= 16
    assert statuses == {"success"}, statuses
    assert not bad_context and not missing_context, (bad_context, missing_context)
    assert on_honest == [], on_honest
    assert s.paused is None and "broadcast.pause" not in s.broadcast_types
    assert by_attacker and {e["severity"] for e in by_attacker} <= {"high"}
    assert {e["run_id"] for e in by_attacker} == {s.shared["run_id"]}  # only its own run
    assert hub_raised_not_violation == [], hub_raised_not_violation
    assert unnamed == [], unnamed
    assert len(s.escalations) <= 40  # slots, not messages
    assert any(d["id"] == s.honest_letter for d in s.letters)  # not wiped
    assert forged == [], forged
    assert all(d["stream"] in (K.out(EVIL), K.inbox(EVIL)) for d in evil_letters)
    assert [d["stream"] for d in rejected] == [K.inbox(EVIL)]  # its own inbox, once
    assert [d["stream"] for d in doubled] == [K.out(EVIL)]  # its field named twice: refused
    assert shared_ctx["artifact"] == ("app.tar", BUILD)  # another agent's entry: intact
    assert shared_ctx.get("evil-note") == (f"written by {EVIL}", EVIL)  # its own cue: its own
    assert s.header_bytes < 4096, s.header_bytes
    assert len(record["errors"]) <= 20 and record["totals"]["errors"] >= 100
    assert s.hub_alive and s.same_hub


def test_honest_runs_keep_their_speed_under_attack(scenario: Scenario, figure: Figure) -> None:
    s = scenario
    base = statistics.median(s.baseline_s)
    under = [x["record"]["duration_s"] for x in s.during]
    after = [x["record"]["duration_s"] for x in s.after]
    ratio = statistics.median(under) / base if under else float("inf")
    figure(
        row=14,
        phase="speed",
        fault=f"the same attacker, for {s.seconds.get('total', 0):.0f} s ({FLOOD:,}-entry "
        "flood and three 10 MiB entries included)",
        promise="the honest runs finish within 2x of their time without the attacker (medians)",
        measured=f"3-cue run without the attacker: median {base:.3f} s of {len(s.baseline_s)}; "
        f"during the attack: median {statistics.median(under):.3f} s, max {max(under):.3f} s "
        f"of {len(under)} ({ratio:.2f}x); after it: median "
        f"{statistics.median(after):.3f} s of {len(after)}",
    )
    assert len(under) >= 5, "too few honest runs overlapped the attack to judge"
    assert ratio <= 2.0, (base, under)


def test_a_flood_of_made_up_run_ids_stays_within_a_memory_bound(
    scenario: Scenario, figure: Figure
) -> None:
    s = scenario
    m = s.mem
    beyond = m["beyond"]
    rss_growth = m["rss_peak"] - m["rss_before"]
    figure(
        row=14,
        phase="flood",
        fault=f"the attacker XADDs {FLOOD:,} entries naming made-up run ids to its own out "
        "stream, then three 10 MiB entries",
        promise=f"Redis grows by no more than the attacker's own out stream + "
        f"{REDIS_ALLOWANCE_MIB} MiB (the audit stream, capped at CALLBOARD_AUDIT_MAXLEN "
        f"batches, takes most of it); hub RSS by at most {HUB_RSS_MIB} MiB; one escalation "
        "for them all; GET /v1/deadletters under 1 MiB",
        measured=f"Redis +{m['redis_growth']:.1f} MiB at peak; beyond its own stream "
        f"+{beyond:.1f} MiB at peak (the audit stream grew "
        f"{m['audit']:.1f} MiB, measured after the flood); hub RSS "
        f"{m['rss_before']:.0f} -> {m['rss_peak']:.0f} MiB at "
        f"peak (+{rss_growth:.0f}); flood drained in {s.seconds['flood']:.1f} s; "
        f"GET /v1/deadletters {s.deadletters_page_bytes / 1024:.0f} KiB after the 10 MiB "
        "entries",
    )
    unknown = [e for e in s.escalations if e["cause"] == f"unknown_run:{EVIL}"]
    assert len(unknown) == 1 and unknown[0]["count"] >= FLOOD
    assert beyond <= REDIS_ALLOWANCE_MIB, m
    assert rss_growth <= HUB_RSS_MIB, m
    assert s.deadletters_page_bytes < 1024 * 1024
