"""Benchmark: what targets by capability cost the engine as runs pile up.

Run `python bench/targets.py`. On the pure engine (no Redis, no processes), in one process:

  start   a run whose one cue targets `{provides: [review], count: 1}` among 50 agents that
          all match, started while more and more such cues are in a call (choosing the
          least loaded agent each time); baseline: the same cuelist naming its agent
          (`target_agents`), started the same way
  online  the online agents said again, with runs waiting for a capability no agent has:
          the same agents (a replica restarting, or an agent flooding `status.online`),
          and agents whose labels change (still matching none); baseline: the same call
          with no run waiting

Each figure is the mean of a step's calls; the ratio is against the baseline of the same
step.
"""

from __future__ import annotations

import argparse
import time

from hub.engine.core import Engine
from hub.engine.plan import Plan
from protocols.keys import Keys
from protocols.targeting import Candidate
from protocols.validation import load_cuelist

TARGETED = "cuelist: t\ncues:\n  - {id: R, target: {provides: [review], count: 1}}\n"
NAMED = "cuelist: n\ncues:\n  - {id: R, target_agents: [a0]}\n"
WAITING = "cuelist: w\ncues:\n  - {id: R, target: {provides: [nothing], count: 1}}\n"


def plan_of(text: str) -> Plan:
    cuelist, version = load_cuelist(text)
    return Plan.build(cuelist, version)


def agents(count: int, flag: bool = True) -> dict[str, Candidate]:
    return {
        f"a{i}": Candidate(f"a{i}", provides=("review",), labels={"flag": flag})
        for i in range(count)
    }


def engine_with(online: dict[str, Candidate]) -> Engine:
    engine = Engine(Keys("bench:"), clock=time.time)
    engine.agents_online(online)
    return engine


def starts(text: str, total: int, step: int, count: int) -> list[tuple[int, float]]:
    """(cues in a call, µs per run start) after each `step` starts."""
    engine, plan, found = engine_with(agents(count)), plan_of(text), []
    began = time.perf_counter()
    for n in range(1, total + 1):
        engine.start_run(plan, f"r{n}", {}, dry=False)
        engine.take()
        if n % step == 0:
            now = time.perf_counter()
            found.append((len(engine.engaged), (now - began) / step * 1e6))
            began = now
    return found


def onlines(waiting: int, count: int, calls: int) -> tuple[float, float]:
    """µs per `agents_online` with `waiting` runs waiting: (the same agents, changed ones)."""
    engine, plan = engine_with(agents(count)), plan_of(WAITING)
    for n in range(waiting):
        engine.start_run(plan, f"w{n}", {}, dry=False)
    engine.take()
    same, flipped = agents(count), agents(count, flag=False)
    began = time.perf_counter()
    for _ in range(calls):
        engine.agents_online(same)
    same_us = (time.perf_counter() - began) / calls * 1e6
    began = time.perf_counter()
    for i in range(calls):
        engine.agents_online(flipped if i % 2 == 0 else same)
    changed_us = (time.perf_counter() - began) / calls * 1e6
    engine.take()
    return same_us, changed_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000, help="runs started in `start`")
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--waiting", default="100,1000,5000", help="runs waiting in `online`")
    args = parser.parse_args()
    step = max(args.runs // 4, 1)
    print(f"start: a run with one targeted cue, {args.agents} agents matching (count: 1)")
    named = dict(starts(NAMED, args.runs, step, args.agents))
    for engaged, us in starts(TARGETED, args.runs, step, args.agents):
        base = named.get(engaged, 0.0)
        ratio = f"{us / base:5.2f}x" if base else "  n/a"
        print(f"  {engaged:>6,} cues in a call: {us:8.1f} us a start   named agent {base:7.1f} us"
              f"   {ratio}")  # fmt: skip
    print(f"online: the online agents said again ({args.agents} agents), runs waiting for none")
    _, empty_changed = onlines(0, args.agents, 20)
    for waiting in (int(w) for w in args.waiting.split(",") if w):
        same, changed = onlines(waiting, args.agents, 20)
        print(f"  {waiting:>6,} runs waiting: the same agents {same:9.1f} us, changed "
              f"{changed:9.1f} us   (none waiting, changed: {empty_changed:.1f} us)")  # fmt: skip


if __name__ == "__main__":
    main()
