"""A benchmark's results as a plain text table: a header, a rule, left-aligned columns."""

from __future__ import annotations

from collections.abc import Sequence


def print_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    cells = [tuple(head), *(tuple(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for i, c in enumerate(cells):
        print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
