"""requirements.lock against pyproject.toml (scripts/check_lock.py, run by scripts/test),
and every install path using the lock."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_lock", ROOT / "scripts" / "check_lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_lock = _load()
PYPROJECT = """
[project]
name = "callboard"
dependencies = [
  "fastapi>=0.110", "redis[hiredis]>=5.0", "PyYAML>=6.0", "tomli; python_version<'3.11'",
]
[project.optional-dependencies]
dev = ["pytest>=8", "callboard[other]"]
"""
LOCK = "# header\nfastapi==0.165.0\nredis==8.1.0\nhiredis==3.5.0\npyyaml==6.0.3\npytest==9.2.0\n"


def write(tmp_path: Path, pyproject: str, lock: str) -> tuple[Path, Path]:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "requirements.lock").write_text(lock)
    return tmp_path / "pyproject.toml", tmp_path / "requirements.lock"


def test_the_repository_lock_agrees_with_pyproject() -> None:
    assert check_lock.problems(ROOT / "pyproject.toml", ROOT / "requirements.lock") == []


def test_an_agreeing_pair(tmp_path: Path) -> None:
    # names compare as PEP 503 says (PyYAML / pyyaml); markers that do not apply are skipped
    assert check_lock.problems(*write(tmp_path, PYPROJECT, LOCK)) == []


@pytest.mark.parametrize(
    ("pyproject", "lock", "problem"),
    [
        (PYPROJECT.replace("pytest>=8", "pytest>=10"), LOCK,
         "optional-dependencies.dev: pytest>=10 does not allow the pinned pytest==9.2.0"),
        (PYPROJECT, LOCK.replace("pytest==9.2.0\n", ""),
         "optional-dependencies.dev: pytest>=8 is not pinned in requirements.lock"),
        (PYPROJECT.replace('"PyYAML>=6.0"', '"PyYAML>=6.0", "httpx>=0.27"'), LOCK,
         "dependencies: httpx>=0.27 is not pinned"),
        (PYPROJECT, LOCK.replace("hiredis==3.5.0\n", ""),
         "is not pinned in requirements.lock (for redis[hiredis])"),
    ],
)  # fmt: skip
def test_a_disagreement_is_named(tmp_path: Path, pyproject: str, lock: str, problem: str) -> None:
    found = check_lock.problems(*write(tmp_path, pyproject, lock))
    assert len(found) == 1 and problem in found[0], found
    assert check_lock.main(["--pyproject", str(tmp_path / "pyproject.toml"),
                            "--lock", str(tmp_path / "requirements.lock")]) == 1  # fmt: skip


def test_a_line_that_is_no_pin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"requirements.lock:3: not a `name==version` pin"):
        check_lock.problems(*write(tmp_path, PYPROJECT, LOCK.replace("redis==8.1.0", "redis>=8")))


def test_relocking_keeps_the_pins_pyproject_still_allows(tmp_path: Path) -> None:
    pyproject, lock = write(tmp_path, PYPROJECT.replace("fastapi>=0.110", "fastapi>=0.200"), LOCK)
    kept = check_lock.allowed_pins(pyproject, lock)
    assert "fastapi==0.165.0" not in kept  # out of the new range: resolved afresh
    assert {"redis==8.1.0", "hiredis==3.5.0", "pyyaml==6.0.3", "pytest==9.2.0"} <= set(kept)


def test_every_install_uses_the_lock() -> None:
    assert "-c requirements.lock -e '.[dev]'" in (ROOT / "scripts" / "_venv.sh").read_text()
    assert "pip install -c requirements.lock ." in (ROOT / "Dockerfile").read_text()
    assert "COPY pyproject.toml README.md requirements.lock" in (ROOT / "Dockerfile").read_text()
    assert "python scripts/check_lock.py" in (ROOT / "scripts" / "test").read_text()
    for script in ("up", "test"):
        assert 'source "$(dirname "$0")/_venv.sh"' in (ROOT / "scripts" / script).read_text()


FAKE_PYTHON = """#!/bin/sh
# stands in for python3 and the venv's python: says on stderr what it was asked to do
[ "$1" = "--version" ] && { echo "Python 3.99.0"; exit 0; }
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
echo "RAN: $*" >&2
"""


def test_the_first_setup_says_what_it_does_before_installing(tmp_path: Path) -> None:
    """Issue 13: the first `scripts/up` said nothing for ~25 s while it installed."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "_venv.sh").write_text((ROOT / "scripts" / "_venv.sh").read_text())
    for name in ("pyproject.toml", "requirements.lock"):
        (tmp_path / name).write_text("")
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    setup = ["bash", "-c", f"source {tmp_path / 'scripts' / '_venv.sh'}"]
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake)}
    first = subprocess.run(setup, env=env, capture_output=True, text=True, timeout=30)
    assert first.returncode == 0, first.stderr
    said = first.stderr.splitlines()
    install = next(n for n, line in enumerate(said) if line.startswith("RAN: -m pip install -q -c"))
    before = [line for line in said[:install] if not line.startswith("RAN:")]
    assert any("creating .venv with Python 3.99.0" in line for line in before), said
    assert any("installing callboard" in line and "half a minute" in line for line in before)
    assert "ready in" in said[-1]
    again = subprocess.run(setup, env=env, capture_output=True, text=True, timeout=30)
    assert again.returncode == 0 and again.stderr == ""  # installed: nothing to say or do
