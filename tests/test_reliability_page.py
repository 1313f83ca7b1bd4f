"""scripts/reliability.py rewrites RELIABILITY.md's header and table from a run's figures
and keeps the page's own prose (how sizes were scaled, what the rows found) as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts import reliability as script  # scripts/ is a namespace package from the root

ROOT = Path(__file__).resolve().parents[1]


def _row(n: int, passed: bool = True) -> dict[str, Any]:
    return {
        "row": n, "fault": f"fault {n}", "promise": "kept | piped", "measured": "1\n2",
        "passed": passed, "test": f"tests/faults/test_r{n:02d}.py::t",
    }  # fmt: skip


def test_a_new_run_keeps_every_line_of_the_pages_prose() -> None:
    page = (ROOT / "RELIABILITY.md").read_text()
    prose = script.prose(page)
    assert prose.startswith("\n## How the sizes were scaled for CI")
    assert "## What the rows found" in prose

    new = script.render([_row(2), _row(1, passed=False)], 12.0, prose)

    assert new.endswith(prose)
    table = new[: -len(prose)]
    rows = [
        line for line in table.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")
    ]
    assert [r[:4] for r in rows] == ["| 1 ", "| 2 "]  # in row order, one line each
    assert "**NO**" in rows[0] and "kept \\| piped" in rows[1]
    assert "1/2 rows kept" in " ".join(table.split())
    assert script.prose(new) == prose  # and again on the next run


def test_a_page_without_prose_gets_the_table_alone() -> None:
    new = script.render([_row(1)], 1.0, script.prose("# Reliability\n\n| # | x |\n"))
    assert new.rstrip().endswith("`pytest 'tests/faults/test_r01.py::t'` |")
