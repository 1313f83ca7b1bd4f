"""Does requirements.lock agree with pyproject.toml? (scripts/test runs this; CI fails if not.)

Every requirement of pyproject.toml, the optional ones (dev...) included, must be pinned
in the lock (`name==version`) at a version its range allows; for a requirement with
extras (`redis[hiredis]`) the extras' own requirements must be pinned too, when the
package is installed to say what they are. `--keep-allowed` prints the lock's pins that
pyproject still allows instead (scripts/lock resolves under them, so adding a dependency
moves nothing else).

    python scripts/check_lock.py [--pyproject FILE] [--lock FILE] [--keep-allowed]
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare venv (scripts/lock): the copy pip carries
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)")


def canonical(name: str) -> str:
    """PEP 503: `PyYAML`, `pyyaml` and `py_yaml` are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(pyproject: Path) -> list[tuple[str, Requirement]]:
    """(where it is declared, requirement) for every dependency, extras included."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found = [("dependencies", Requirement(r)) for r in project.get("dependencies", [])]
    for extra, items in sorted(project.get("optional-dependencies", {}).items()):
        found += [(f"optional-dependencies.{extra}", Requirement(r)) for r in items]
    own = canonical(project["name"])
    return [(where, r) for where, r in found if canonical(r.name) != own]


def pins(lock: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for number, line in enumerate(lock.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        match = PIN.match(text)
        if match is None:
            raise SystemExit(f"{lock}:{number}: not a `name==version` pin: {text}")
        found[canonical(match[1])] = match[2]
    return found


def applies(req: Requirement, extra: str = "") -> bool:
    return req.marker is None or req.marker.evaluate({"extra": extra})


def extra_requirements(req: Requirement) -> list[Requirement]:
    """What `req`'s extras add, from the installed package's metadata (none if absent)."""
    if not req.extras:
        return []
    try:
        declared = metadata.requires(req.name) or []
    except metadata.PackageNotFoundError:
        return []
    subs = [Requirement(text) for text in declared]
    return [
        s for s in subs  # needed with one of the extras and not without them
        if s.marker is not None and any(applies(s, e) for e in req.extras) and not applies(s)
    ]  # fmt: skip


def problems(pyproject: Path, lock: Path) -> list[str]:
    pinned = pins(lock)
    found = []
    for where, req in requirements(pyproject):
        if not applies(req):
            continue
        for r, via in [(req, ""), *((s, f" (for {req.name}[{','.join(req.extras)}])")
                                    for s in extra_requirements(req))]:  # fmt: skip
            version = pinned.get(canonical(r.name))
            if version is None:
                found.append(f"{where}: {r} is not pinned in {lock.name}{via}")
            elif not r.specifier.contains(version, prereleases=True):
                found.append(f"{where}: {r} does not allow the pinned {r.name}=={version}{via}")
    return found


def allowed_pins(pyproject: Path, lock: Path) -> list[str]:
    """The lock's pins, less those of direct requirements whose range now excludes them."""
    ranges = {canonical(r.name): r.specifier for _, r in requirements(pyproject)}
    kept = []
    for name, version in sorted(pins(lock).items()):
        spec = ranges.get(name)
        if spec is None or spec.contains(version, prereleases=True):
            kept.append(f"{name}=={version}")
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument("--lock", type=Path, default=ROOT / "requirements.lock")
    parser.add_argument("--keep-allowed", action="store_true")
    args = parser.parse_args(argv)
    if not args.lock.exists():
        print(f"no {args.lock}: run scripts/lock", file=sys.stderr)
        return 1
    if args.keep_allowed:
        print("\n".join(allowed_pins(args.pyproject, args.lock)))
        return 0
    found = problems(args.pyproject, args.lock)
    for problem in found:
        print(f"lock: {problem}", file=sys.stderr)
    if found:
        print("pyproject.toml and requirements.lock disagree: run scripts/lock", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
