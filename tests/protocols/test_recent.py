"""Recent: a bounded cache keeps the most recently used entries."""

from __future__ import annotations

from protocols.recent import Recent


def test_the_oldest_used_entry_goes_first() -> None:
    kept: Recent[str, int] = Recent(2)
    kept.put("a", 1)
    kept.put("b", 2)
    assert kept.get("a") == 1  # "a" is now the newest
    kept.put("c", 3)
    assert "b" not in kept and kept.get("a") == 1 and kept.get("c") == 3
    assert len(kept) == 2
    assert kept.pop("a") == 1 and kept.pop("a") is None and kept.get("zzz") is None
