"""The documents cite only what a reader of the repository can open (issue 16: a new user
was sent to documents that are not in it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "PROTOCOL.md", "RELIABILITY.md"]
SOURCE_DIRS = ["protocols", "hub", "specialists", "callboard", "tests", "cuelists", "examples",
               "scripts", "bench", "docs", ".ci"]  # fmt: skip
TEXT = {".py", ".md", ".yaml", ".yml", ".js", ".json", ".toml", ".html", ".sh", ""}


def _files() -> list[Path]:
    found = [ROOT / name for name in [*DOCS, "Dockerfile", "docker-compose.yml", "pyproject.toml"]]
    for folder in SOURCE_DIRS:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in TEXT and "node_modules" not in path.parts:
                found.append(path)
    return found


@pytest.mark.parametrize("doc", ["README.md", "RELIABILITY.md"])
def test_relative_links_point_at_files_that_exist(doc: str) -> None:
    text = (ROOT / doc).read_text()
    targets = re.findall(r"\]\(((?!https?:|#)[^)]+)\)", text)
    assert [t for t in targets if not (ROOT / t.split("#")[0]).exists()] == []


def test_no_file_names_a_document_that_is_not_in_the_repository() -> None:
    """Design notes and the product spec lived outside the repository: naming them sends a
    reader nowhere. (Upper-case names only: `plan.md` in a test is data, not a citation.)"""
    missing = []
    for path in _files():
        for name in set(re.findall(r"\b([A-Z][A-Z0-9_-]*\.md)\b", path.read_text(errors="ignore"))):
            if not (ROOT / name).exists():
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []


def test_what_a_user_reads_does_not_cite_the_seed_documents() -> None:
    """The seeds (numbered documents and their "Protocol N") are not in the repository."""
    cited = re.compile(r"\bseeds?\b|\(Protocol \d+\)", re.IGNORECASE)
    readable = [ROOT / d for d in DOCS] + sorted((ROOT / "cuelists").rglob("*.yaml"))
    examples = sorted((ROOT / "examples").rglob("*"))
    readable += [
        p for p in examples if p.suffix in {".py", ".js"} and "node_modules" not in p.parts
    ]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in readable
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if cited.search(line)
    ]
    assert found == []
