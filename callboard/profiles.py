"""Which hub the CLI talks to: flags, environment, and named profiles for several hubs.

The profile file (`$CALLBOARD_CONFIG`, else `~/.config/callboard/profiles.toml`, under
`$XDG_CONFIG_HOME` when set) names hubs, as the `temporal` and `prefect` CLIs do:

    default = "local"                 # used when no profile is named (optional)

    [profiles.local]
    url = "http://127.0.0.1:8080"

    [profiles.prod]
    url = "https://callboard.example.com"
    api_key_env = "PROD_CALLBOARD_KEY"   # read the key from this variable (or: api_key = "...")

What wins, first to last: a flag on the command line (`--url`, `--api-key`); the profile
named by `--profile` or CALLBOARD_PROFILE; CALLBOARD_URL / CALLBOARD_API_KEY; the file's
`default` profile; http://127.0.0.1:8080 and no key. A named profile beats the variables
so that `--profile prod` never quietly talks to the hub an `export CALLBOARD_URL=` set up.

A key goes only to the hub it was given for: `--api-key`; a profile's key when the URL is
that profile's; CALLBOARD_API_KEY when CALLBOARD_URL is unset or is the URL. So
`--url http://other` or an exported CALLBOARD_URL never carries a profile's key elsewhere.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"
KEYS = frozenset({"url", "api_key", "api_key_env"})


class ProfileError(Exception):
    """The profile file cannot be used, or names no such profile."""


@dataclass(frozen=True)
class Target:
    url: str
    api_key: str | None
    profile: str | None  # the profile that was used, if any


def config_path(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("CALLBOARD_CONFIG"):
        return Path(env["CALLBOARD_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "callboard" / "profiles.toml"


def load(path: Path) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """The file's default profile name and its profiles; none when there is no file."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"{path}: {exc}") from None
    profiles = doc.get("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(p, dict) for p in profiles.values()):
        raise ProfileError(f"{path}: [profiles.NAME] tables expected")
    for name, profile in profiles.items():
        unknown = set(profile) - KEYS
        if unknown:
            known = ", ".join(sorted(KEYS))
            raise ProfileError(f"{path}: profile {name}: unknown keys {sorted(unknown)} ({known})")
    default = doc.get("default")
    if default is not None and default not in profiles:
        raise ProfileError(f"{path}: default names no profile: {default!r}")
    return default, profiles


def resolve(
    *,
    url_flag: str | None = None,
    key_flag: str | None = None,
    profile: str | None = None,
    env: Mapping[str, str] = os.environ,
) -> Target:
    """The hub to talk to, by the order in the module docstring. `url_flag`/`key_flag` are
    values typed on the command line only (the caller tells them from the variables)."""
    path = config_path(env)
    default, profiles = load(path)
    chosen = profile or env.get("CALLBOARD_PROFILE") or None
    if chosen is not None and chosen not in profiles:
        names = ", ".join(sorted(profiles)) or "none"
        raise ProfileError(f"no profile {chosen!r} in {path} (profiles: {names})")
    named = profiles.get(chosen) if chosen else None
    fallback = profiles.get(default) if default and not chosen else None

    def key_of(p: dict[str, Any] | None) -> str | None:
        if p is None:
            return None
        if p.get("api_key_env"):
            return env.get(str(p["api_key_env"])) or None
        return str(p["api_key"]) if p.get("api_key") else None

    url = str(
        url_flag
        or (named or {}).get("url")
        or env.get("CALLBOARD_URL")
        or (fallback or {}).get("url")
        or DEFAULT_URL
    ).rstrip("/")

    def for_url(other: Any) -> bool:
        return bool(other) and str(other).rstrip("/") == url

    env_key = env.get("CALLBOARD_API_KEY") if for_url(env.get("CALLBOARD_URL") or url) else None
    api_key = (
        key_flag
        or (key_of(named) if for_url((named or {}).get("url")) else None)
        or env_key
        or (key_of(fallback) if for_url((fallback or {}).get("url")) else None)
    )
    used = chosen or (default if fallback is not None else None)
    return Target(url, api_key or None, used)
