"""A specialist's labels: registered with its contract, from the SDK, settings or the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from callboard.specialist_cmd import with_provides
from callboard.up import contracts_of, echo_argv
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


def test_cli_provides_extends_the_contract_and_up_passes_inline_contracts(tmp_path: Path) -> None:
    base = Contract(provides=("a",), requires=("r",))
    assert with_provides(base, " b, a ,c").provides == ("a", "b", "c")
    assert with_provides(base, "") is base
    first = tmp_path / "one.yaml"
    first.write_text("cuelist: one\nspecialists:\n  x: {provides: [p1], requires: [k]}\n"
                     "cues: [{id: A, target_agents: [x]}]\n")  # fmt: skip
    second = tmp_path / "two.yaml"
    second.write_text("cuelist: two\nspecialists:\n  x: {provides: [p2], labels: {gpu: true}}\n"
                      "cues: [{id: A, target_agents: [x]}]\n")  # fmt: skip
    contracts = contracts_of([first, second])
    assert contracts == {"x": {"provides": ["p1", "p2"], "labels": {"gpu": True}}}
    argv = echo_argv("x", contracts)
    assert argv[-4:] == ["--provides", "p1,p2", "--labels", "gpu=true"]
    assert "--provides" not in echo_argv("y", contracts)
