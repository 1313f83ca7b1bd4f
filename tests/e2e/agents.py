"""Specialists used only by end-to-end tests (run as `tests.e2e.agents:Class`)."""

from __future__ import annotations

from typing import Any

from specialists import Result, Specialist


class ContextReporter(Specialist):
    """Reads the run's shared context by key, tag and source, and writes back what it saw."""

    kind = "context-reporter"

    async def execute(self, cue: Any) -> Result:
        by_key = await cue.read_context("build_id")
        by_tag = await cue.read_context(tag="build")
        by_source = await cue.read_context(source="ctx-writer")
        seen = {"by_key": by_key, "by_tag": sorted(by_tag), "by_source": sorted(by_source)}
        return Result(result=seen, context={"seen": seen})
