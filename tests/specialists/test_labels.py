"""A specialist's labels: registered with its contract, from the SDK, settings or the CLI."""

from __future__ import annotations

import pytest

from protocols.contracts import Contract
from protocols.settings import Settings
from specialists.base import Specialist
from specialists.builtin.echo import Echo


def test_labels_merge_contract_then_settings_then_argument() -> None:
    contract = Contract(provides=("code_review",), labels={"zone": "us", "tier": 1})
    settings = Settings(labels="gpu=true,zone=eu")
    spec = Specialist("rev-1", "r1", settings, contract, labels={"tier": 2})
    assert spec.contract.labels == {"zone": "eu", "tier": 2, "gpu": True}
    assert spec.contract.provides == ("code_review",)


def test_builtins_take_labels_from_settings_and_bad_ones_are_refused() -> None:
    echo = Echo("echo-1", "r1", Settings(labels="gpu=true,mem_gb=16"))
    assert echo.contract.labels == {"gpu": True, "mem_gb": 16}
    assert Echo("echo-2", "r1", Settings()).contract.labels == {}
    with pytest.raises(ValueError, match="bad label"):
        Echo("echo-3", "r1", Settings(labels="gpu"))
    with pytest.raises(ValueError):
        Specialist("x", "r1", Settings(), labels={"v": "x" * 300})
