"""Where the CPU goes: bench/cues.py under py-spy, the top frames of the hub and the agents.

Runs `python bench/cues.py ARGS` under `py-spy record --subprocesses` (sampling every
process the bench starts: the hub, the echo specialist or the agents' host, the bench's
own client), then prints per process role the samples it was busy (idle threads are not
sampled) and its top frames: by self time (the function on top of the stack) and by
total time (anywhere on the stack, callboard's own code only).

    python bench/frames.py [--top 15] [--rate 250] [--raw FILE] -- --only d --jobs 5000
    python bench/frames.py --summarise FILE       # the top frames of stacks kept with --raw

py-spy comes with the dev extra; it samples from outside the process (no tracing hooks),
so the figures the bench prints under it are a little lower than without it.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN = ("hub/", "protocols/", "specialists/", "callboard/")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def role(stack: list[str]) -> str:
    """Which process of the bench a sampled stack belongs to."""
    procs = [f for f in stack if f.startswith("process ")]
    joined = ";".join(stack)
    if "specialist_cmd echo" in (procs[-1] if procs else ""):
        return "echo"
    if "hub_process" in joined:
        return "hub"
    if "raw_agents_process" in joined:
        return "raw agents"
    if "agents_process" in joined:
        return "agents (SDK echo host)"
    if "celery" in (procs[-1] if procs else ""):
        return "celery worker"
    return "bench (client)" if len(procs) == 1 else "other"


def short(frame: str) -> str:
    """`Engine.go (hub/engine/core.py:348)` -> `Engine.go (hub/engine/core.py)`."""
    match = FRAME.match(frame)
    return f"{match['func']} ({match['file']})" if match else frame


def summarise(raw: Path, top: int) -> str:
    selfs: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    busy: collections.Counter[str] = collections.Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count, stack = int(count_text), stack_text.split(";")
        who = role(stack)
        frames = [short(f) for f in stack if not f.startswith("process ")]
        if not frames:
            continue
        busy[who] += count
        selfs[who][frames[-1]] += count
        for frame in set(frames):
            if any(f"({own}" in frame for own in OWN):
                totals[who][frame] += count
    out = []
    for who, samples in busy.most_common():
        if who in ("other", "celery worker"):
            continue
        out.append(f"\n== {who}: {samples} busy samples")
        out.append(f"   self {'':>3} {'':<70}   total")
        for (frame, n), (tframe, tn) in zip(
            selfs[who].most_common(top), totals[who].most_common(top), strict=False
        ):
            out.append(f"   {n / samples:5.1%}  {frame[:70]:<70}   {tn / samples:5.1%}  {tframe}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15, help="frames shown per process")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--raw", default=None, help="keep py-spy's raw stacks in this file")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- then bench/cues.py's args")
    parser.add_argument("--summarise", default=None, help="only summarise this --raw file")
    args = parser.parse_args()
    if args.summarise:
        print(summarise(Path(args.summarise), args.top))
        return
    bench_args = [a for a in args.bench if a != "--"] or ["--only", "d"]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(args.raw) if args.raw else Path(tmp) / "stacks.txt"
        argv = ["py-spy", "record", "--subprocesses", "--nonblocking", "-r", str(args.rate),
                "-f", "raw", "-o", str(raw), "--", sys.executable, str(ROOT / "bench/cues.py"),
                *bench_args]  # fmt: skip
        subprocess.run(argv, check=True, cwd=ROOT)
        print(summarise(raw, args.top))


if __name__ == "__main__":
    main()
