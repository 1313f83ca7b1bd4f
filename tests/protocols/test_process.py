"""protocols.process: the event loop a hub or specialist runs on (uvloop when installed)."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from protocols.process import UVLOOP_ENV, loop_factory, loop_name, run


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_returns_what_the_coroutine_returns_on_the_chosen_loop() -> None:
    module = run(_loop_module())
    if loop_name() == "uvloop":
        assert module.startswith("uvloop")
    else:
        assert module.startswith("asyncio")


def test_uvloop_when_installed_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = importlib.util.find_spec("uvloop") is not None
    monkeypatch.delenv(UVLOOP_ENV, raising=False)
    assert (loop_factory() is not None) is installed
    assert loop_name() == ("uvloop" if installed else "asyncio")
    monkeypatch.setenv(UVLOOP_ENV, "0")
    assert loop_factory() is None and loop_name() == "asyncio"
    assert run(_loop_module()).startswith("asyncio")
