"""Run the fault suite (tests/faults) and write its measured figures into RELIABILITY.md.

    python scripts/reliability.py [PYTEST ARGS...]
    python scripts/reliability.py --rows FILE     # render what a run with the env set wrote

Each test appends one JSON line {row, fault, promise, measured, passed, test} to the file
named by CALLBOARD_RELIABILITY_OUT (see tests/faults/conftest.py); this script sets it,
runs pytest, and renders the lines as a table with the command that reproduces each row.
Everything on the page after the table is the page's own and is kept as it is.
Exit status is pytest's: a broken promise fails the script as well as the table.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "RELIABILITY.md"
ENV = "CALLBOARD_RELIABILITY_OUT"

HEAD = """\
# Reliability and security figures

Measured by the fault suite in `tests/faults/`: real processes (hub, specialists), a real
Redis started by each test on a free loopback port, faults injected for real (kill -9,
SIGSTOP, Redis restarts, garbage on the streams, hostile HTTP bodies). Every row is a test
that fails when its promise breaks; `scripts/test` (CI) runs them all (marked `slow`).
Regenerate this page with:

    python scripts/reliability.py

Last run: {when}, {machine}; {redis}; fault suite {duration:.0f} s; {passed}/{total} rows kept
their promise.

| # | fault | promise | measured | kept | reproduce |
|---|---|---|---|---|---|
"""

# The page's prose (how the sizes were scaled, durability, what the rows found) lives in
# RELIABILITY.md alone: a run rewrites the header and the table and keeps every section
# after the table as it is, so editing the page is the one way to change its text.
PROSE = "\n## "


def _row_key(row: dict[str, Any]) -> int:
    return int(row.get("row", 99))  # stable: a row's cases stay in the order they ran


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _redis_version() -> str:
    sys.path.insert(0, str(ROOT))
    from callboard.embedded import server_binary

    try:
        out = subprocess.run(
            [server_binary(), "--version"], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "Redis version unknown"
    words = dict(w.split("=", 1) for w in out.stdout.split() if "=" in w)
    return f"redis-server {words.get('v', '?')}"


def prose(page: str) -> str:
    """What follows the table in `page` (a RELIABILITY.md): kept as it is by a new run."""
    table = page.find("\n| # |")
    at = page.find(PROSE, table if table >= 0 else 0)
    return page[at:] if at >= 0 else ""


def render(rows: list[dict[str, Any]], duration_s: float, rest: str = "") -> str:
    """The page for `rows`: the header, the table, then `rest` (the old page's prose)."""
    rows = sorted(rows, key=_row_key)
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    text = HEAD.format(
        when=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine,
        redis=_redis_version(),
        duration=duration_s,
        passed=sum(1 for r in rows if r.get("passed")),
        total=len(rows),
    )
    for r in rows:
        label = f"{r['row']}" + (f" ({r['phase']})" if r.get("phase") else "")
        command = f"`pytest '{r['test']}'`"
        kept = "yes" if r.get("passed") else "**NO**"
        cells = [label, r.get("fault", ""), r.get("promise", ""), r.get("measured", "")]
        text += "| " + " | ".join(_cell(c) for c in cells) + f" | {kept} | {command} |\n"
    return text + rest


def _write(rows: list[dict[str, Any]], duration_s: float) -> None:
    old = OUT.read_text() if OUT.exists() else ""
    OUT.write_text(render(rows, duration_s, prose(old)))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--rows"]:  # the figures a run elsewhere recorded (CI, with the env set)
        rows = [json.loads(x) for x in Path(argv[1]).read_text().splitlines() if x.strip()]
        spans = [(r["began"], r["ended"]) for r in rows if "began" in r]
        duration = max(e for _, e in spans) - min(b for b, _ in spans) if spans else 0.0
        _write(rows, duration)
        print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} rows")
        return 0 if all(r.get("passed") for r in rows) else 1
    with tempfile.TemporaryDirectory(prefix="callboard-reliability-") as tmp:
        lines = Path(tmp) / "rows.jsonl"
        env = {**os.environ, ENV: str(lines)}
        began = time.monotonic()
        code = subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "tests/faults", *argv], cwd=ROOT, env=env
        )
        duration = time.monotonic() - began
        rows = [json.loads(x) for x in lines.read_text().splitlines()] if lines.exists() else []
    if not rows:
        print("no figures were recorded", file=sys.stderr)
        return code or 1
    _write(rows, duration)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} rows in {duration:.0f} s")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
