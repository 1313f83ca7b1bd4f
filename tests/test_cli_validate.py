"""`callboard validate` and `callboard schema`: exit codes 0/1/2, plain and JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from callboard.cli import app

EXAMPLES = sorted(str(p) for p in (Path(__file__).parents[1] / "cuelists").glob("*.yaml"))
runner = CliRunner()


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "cuelist: bad\ncues:\n  - id: CUE-100\n    target_agents: [a]\n    depends_on: [CUE-100]\n"
        "  - id: CUE-200\n    target_agents: []\n"
    )
    return path


def test_every_example_is_valid() -> None:
    result = runner.invoke(app, ["validate", *EXAMPLES])
    assert result.exit_code == 0, result.output
    assert result.output.count(": valid, version ") == len(EXAMPLES)
    assert "warning: cue NIGHTLY-210 key resources" in result.output


def test_invalid_lists_every_error_with_file_and_line(bad: Path) -> None:
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:5: cue CUE-100 key depends_on: CUE-100 depends on itself" in result.output
    assert f"{bad}:7: cue CUE-200 key target_agents: must not be empty" in result.output
    assert f"{bad}: invalid, 2 errors" in result.output


def test_strict_turns_the_conflict_warning_into_an_error() -> None:
    shared = next(p for p in EXAMPLES if p.endswith("shared-runner.yaml"))
    assert runner.invoke(app, ["validate", shared]).exit_code == 0
    assert runner.invoke(app, ["validate", "--strict", shared]).exit_code == 1


def test_unusable_input_exits_2(tmp_path: Path, bad: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    for args in ([str(tmp_path / "missing.yaml")], [str(binary)], [str(tmp_path)]):
        result = runner.invoke(app, ["validate", *args])
        assert result.exit_code == 2, (args, result.output)
    assert runner.invoke(app, ["validate", str(bad), str(tmp_path / "nope")]).exit_code == 2


def test_over_the_size_limit_is_unusable_input(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (5 << 20))  # 5 MB: not a cuelist to check, input to refuse
    result = runner.invoke(app, ["validate", str(big)])
    assert result.exit_code == 2 and "over the 1048576-byte limit" in result.output
    result = runner.invoke(app, ["validate", "--json", str(big)])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["files"][0]["errors"][0]["code"] == "too_large"


def test_json_output(bad: Path) -> None:
    result = runner.invoke(app, ["validate", "--json", EXAMPLES[0], str(bad)])
    assert result.exit_code == 1
    files = json.loads(result.stdout)["files"]
    assert [f["valid"] for f in files] == [True, False]
    assert len(files[0]["version"]) == 64 and files[1]["version"] is None
    assert {"code", "message", "cue", "key", "line", "severity"} <= set(files[1]["errors"][0])
    assert [e["code"] for e in files[1]["errors"]] == ["self_dependency", "empty"]  # by line


def test_stdin() -> None:
    result = runner.invoke(
        app, ["validate", "-"], input="cuelist: x\ncues: [{id: A, target_agents: [a]}]\n"
    )
    assert result.exit_code == 0, result.output


def test_schema_is_json_schema_of_the_language() -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"cuelist", "cues", "start", "defaults", "specialists"} <= set(schema["properties"])


def test_a_json_file_with_a_duplicate_key_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text(
        '{"cuelist": "dup",\n "cues": [{"id": "A", "target_agents": ["a"],\n "id": "B"}]}'
    )
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:3: key 'id' appears twice in one mapping (duplicate_key)" in result.output
