"""Which hub the CLI talks to: flags, a named profile, CALLBOARD_URL / CALLBOARD_API_KEY,
the file's default profile, the built-in default, in that order; and unique id prefixes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from callboard.cli import app
from callboard.commands import api
from callboard.commands.ids import shortener
from callboard.profiles import DEFAULT_URL, ProfileError, resolve
from tests.cli_fake_hub import SUMMARY, FakeHub

PROFILES = """
default = "local"

[profiles.local]
url = "http://local.test:8080"

[profiles.prod]
url = "https://prod.test"
api_key_env = "PROD_KEY"

[profiles.staging]
url = "https://staging.test/"
api_key = "staging-key"
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.toml"
    path.write_text(PROFILES)
    return path


def test_the_order_of_what_wins(config: Path, tmp_path: Path) -> None:
    none = {"CALLBOARD_CONFIG": str(tmp_path / "absent.toml")}
    assert resolve(env=none).url == DEFAULT_URL and resolve(env=none).api_key is None
    env = {"CALLBOARD_CONFIG": str(config)}
    assert resolve(env=env).url == "http://local.test:8080"  # the file's default
    env["CALLBOARD_URL"] = "http://from-env.test"
    env["CALLBOARD_API_KEY"] = "env-key"
    assert (resolve(env=env).url, resolve(env=env).api_key) == ("http://from-env.test", "env-key")
    named = resolve(env=env, profile="staging")  # a named profile beats the variables
    assert (named.url, named.api_key, named.profile) == (
        "https://staging.test",
        "staging-key",
        "staging",
    )
    assert resolve(env={**env, "CALLBOARD_PROFILE": "staging"}).url == "https://staging.test"
    flagged = resolve(env=env, profile="staging", url_flag="http://flag.test", key_flag="k")
    assert (flagged.url, flagged.api_key) == ("http://flag.test", "k")  # a flag beats all
    prod = resolve(env={**env, "PROD_KEY": "secret"}, profile="prod")
    assert (prod.url, prod.api_key) == ("https://prod.test", "secret")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[profiles.a\nurl=1", "profiles.toml"),
        ('[profiles.a]\nurl = "x"\ntoken = "y"', "unknown keys ['token']"),
        ('default = "b"\n[profiles.a]\nurl = "x"', "default names no profile"),
    ],
)
def test_a_bad_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as refused:
        resolve(env={"CALLBOARD_CONFIG": str(path)})
    assert message in str(refused.value) and str(path) in str(refused.value)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, config: Path) -> FakeHub:
    hub = FakeHub()
    monkeypatch.setattr(api, "TRANSPORT", hub.transport)
    for name in ("CALLBOARD_PROFILE", "CALLBOARD_API_KEY", "CALLBOARD_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CALLBOARD_CONFIG", str(config))
    return hub


def test_commands_use_the_profile(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["runs"]).exit_code == 0
    assert fake.calls[-1][2].url.host == "local.test"
    monkeypatch.setenv("PROD_KEY", "prod-secret")
    monkeypatch.setenv("CALLBOARD_URL", "http://127.0.0.1:9")  # what `up` told the shell
    assert runner.invoke(app, ["agents", "--profile", "prod"]).exit_code == 0
    request = fake.calls[-1][2]
    assert request.url.host == "prod.test"
    assert request.headers["authorization"] == "Bearer prod-secret"
    result = runner.invoke(app, ["agents", "--profile", "nope"])
    assert result.exit_code == 2 and "no profile 'nope'" in result.output
    assert "local, prod, staging" in result.output


def test_a_unique_prefix_names_a_run(fake: FakeHub) -> None:
    other = {**SUMMARY, "run_id": "0190a3b4-5c6d-7e8f-9a0b-ffffffffffff"}
    fake.answers[("GET", "/v1/runs")] = (200, {"data": [SUMMARY, other], "count": 2})
    runner = CliRunner()
    result = runner.invoke(app, ["cancel", "0190a3b4-5c6d-7e8f-9a0b-1c"])
    assert result.exit_code == 0, result.output
    assert fake.calls[-1][2].url.path == f"/v1/runs/{SUMMARY['run_id']}/cancel"
    result = runner.invoke(app, ["cancel", "0190A3B4"])  # ambiguous: both start so
    assert result.exit_code == 2
    assert "ambiguous" in result.output and "2 match" in result.output
    result = runner.invoke(app, ["status", "ffff"])
    assert result.exit_code == 2 and "no run id starts with 'ffff'" in result.output
    assert fake.calls[-1][1] == "/v1/runs"  # nothing was sent for an unknown prefix


def test_ids_are_whole_when_piped_and_told_apart_on_a_terminal() -> None:
    ids = ["0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b", "0190a3b4-5c6d-7e8f-9a0b-ffffffffffff"]
    assert shortener(ids, terminal=False)(ids[0]) == ids[0]
    short = shortener(ids, terminal=True)
    assert short(ids[0]) == "0190a3b4-5c6d-7e8f-9a0b-1" and short(ids[1]).endswith("-f")
    far = shortener(["0190a3b4-aaaa", "0290a3b4-bbbb"], terminal=True)
    assert far("0190a3b4-aaaa") == "0190a3b4"  # never under 8 characters


def test_a_key_goes_only_to_the_hub_it_was_given_for(config: Path) -> None:
    env = {"CALLBOARD_CONFIG": str(config), "PROD_KEY": "prod-secret"}
    scratch = resolve(env={**env, "CALLBOARD_PROFILE": "prod"}, url_flag="http://other.test")
    assert (scratch.url, scratch.api_key) == ("http://other.test", None)
    up = {**env, "CALLBOARD_URL": "http://scratch.test"}  # what `callboard up` exported
    assert resolve(env=up).api_key is None  # neither the default's key nor any other
    mine = resolve(env=env, profile="staging", url_flag="https://staging.test")
    assert mine.api_key == "staging-key"  # the flag names the profile's own hub
    keyed = resolve(env={**up, "CALLBOARD_API_KEY": "k"}, url_flag="http://elsewhere.test")
    assert keyed.api_key is None  # the variable's key is for the variable's URL
    assert resolve(env={**up, "CALLBOARD_API_KEY": "k"}).api_key == "k"
    assert resolve(env=env, url_flag="http://x.test", key_flag="typed").api_key == "typed"


def test_an_exported_url_never_gets_the_default_profiles_key(
    fake: FakeHub, monkeypatch: pytest.MonkeyPatch, config: Path
) -> None:
    config.write_text(
        'default = "prod"\n[profiles.prod]\nurl = "https://prod.test"\napi_key = "S"\n'
    )
    monkeypatch.setenv("CALLBOARD_URL", "http://scratch.test:8080")
    assert CliRunner().invoke(app, ["agents"]).exit_code == 0
    assert "authorization" not in fake.calls[-1][2].headers
    monkeypatch.delenv("CALLBOARD_URL")
    monkeypatch.setenv("CALLBOARD_PROFILE", "prod")
    assert CliRunner().invoke(app, ["agents", "--url", "http://other.test"]).exit_code == 0
    assert "authorization" not in fake.calls[-1][2].headers
    assert CliRunner().invoke(app, ["agents"]).exit_code == 0
    assert fake.calls[-1][2].headers["authorization"] == "Bearer S"
