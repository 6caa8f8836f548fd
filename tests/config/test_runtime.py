"""Runtime settings: defaults < weft.json < hank overrides < WEFT_RUNTIME_* < CLI."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from weft.config import Hank
from weft.config.runtime import (
    LAYERS,
    RuntimeConfig,
    resolve_runtime_config,
    setting_names,
)
from weft.errors import ConfigError


def a_hank(**overrides: object) -> Hank:
    doc = {
        "overrides": overrides,
        "hank": [
            {"type": "codon", "id": "a", "name": "A", "model": "m", "continuationMode": "fresh"}
        ],
    }
    return msgspec.convert(doc, Hank)


def weft_json(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "weft.json"
    path.write_text(json.dumps(doc))
    return path


def test_defaults_alone() -> None:
    resolved = resolve_runtime_config(env={})
    assert resolved.config == RuntimeConfig()
    assert set(resolved.sources) == set(setting_names())
    assert set(resolved.sources.values()) == {"default"}
    assert resolved.value("sentinel.healthCheckGracePeriodMs") == 2000


def test_each_layer_beats_the_ones_below(tmp_path: Path) -> None:
    path = weft_json(
        tmp_path, {"dataHashTimeLimit": 1, "shimIdleTimeout": 1, "model": "a", "port": 1}
    )
    hank = a_hank(dataHashTimeLimit=2, shimIdleTimeout=2, model="b")
    env = {"WEFT_RUNTIME_SHIM_IDLE_TIMEOUT": "3", "WEFT_RUNTIME_MODEL": "c"}
    resolved = resolve_runtime_config(cli={"model": "d"}, env=env, config_file=path, hank=hank)
    config = resolved.config
    assert (config.port, config.data_hash_time_limit, config.shim_idle_timeout, config.model) == (
        1,
        2,
        3,
        "d",
    )
    assert [
        resolved.sources[k] for k in ("port", "dataHashTimeLimit", "shimIdleTimeout", "model")
    ] == list(LAYERS[1:])


def test_budget_ceilings_take_the_stricter_of_file_and_hank(tmp_path: Path) -> None:
    path = weft_json(tmp_path, {"budget": {"maxDollars": 5, "maxTimeSeconds": 60}})
    hank = a_hank(budget={"maxDollars": 8, "maxTimeSeconds": 30})
    resolved = resolve_runtime_config(env={}, config_file=path, hank=hank)
    assert (resolved.config.budget.max_dollars, resolved.config.budget.max_time_seconds) == (5, 30)
    assert resolved.sources["budget.maxDollars"] == "weft.json"
    assert resolved.sources["budget.maxTimeSeconds"] == "hank overrides"


CEILINGS = [
    ("budget.maxDollars", "WEFT_RUNTIME_BUDGET_MAX_DOLLARS", "max_dollars"),
    ("budget.maxTimeSeconds", "WEFT_RUNTIME_BUDGET_MAX_TIME_SECONDS", "max_time_seconds"),
    ("budget.maxTokens", "WEFT_RUNTIME_BUDGET_MAX_TOKENS", "max_tokens"),
]

TOKEN_SCALE = 1000
"""Tokens are whole numbers: the tables' amounts (0.25, 0.5...) are thousands of tokens."""


def amount(name: str, value: float) -> float | int:
    """``value`` as ``name`` takes it: a whole number of tokens for ``budget.maxTokens``."""
    return int(value * TOKEN_SCALE) if name == "budget.maxTokens" else value


def test_the_ceiling_table_covers_every_budget_setting() -> None:
    assert [name for name, _, _ in CEILINGS] == [
        n for n in setting_names() if n.startswith("budget.")
    ]


@pytest.mark.parametrize(("name", "var", "attr"), CEILINGS)
def test_the_environment_cannot_raise_the_hanks_budget_ceiling(
    name: str, var: str, attr: str
) -> None:
    # The environment is runtime config like weft.json: the hank's stricter ceiling wins.
    key = name.removeprefix("budget.")
    hank = a_hank(budget={key: amount(name, 0.5)})
    resolved = resolve_runtime_config(env={var: str(amount(name, 100))}, hank=hank)
    assert getattr(resolved.config.budget, attr) == amount(name, 0.5)
    assert resolved.sources[name] == "hank overrides"
    # Below the hank's, the environment's is the ceiling.
    resolved = resolve_runtime_config(env={var: str(amount(name, 0.25))}, hank=hank)
    assert getattr(resolved.config.budget, attr) == amount(name, 0.25)
    assert resolved.sources[name] == "environment"


@pytest.mark.parametrize(("name", "var", "attr"), CEILINGS)
def test_the_environment_replaces_weft_json_then_the_stricter_of_it_and_the_hank(
    tmp_path: Path, name: str, var: str, attr: str
) -> None:
    key = name.removeprefix("budget.")
    path = weft_json(tmp_path, {"budget": {key: amount(name, 1)}})
    hank = a_hank(budget={key: amount(name, 10)})
    # Above weft.json's and below the hank's: the variable replaces the file's value.
    resolved = resolve_runtime_config(env={var: str(amount(name, 5))}, config_file=path, hank=hank)
    assert (getattr(resolved.config.budget, attr), resolved.sources[name]) == (
        amount(name, 5),
        "environment",
    )
    # Above the hank's: the hank's.
    resolved = resolve_runtime_config(env={var: str(amount(name, 50))}, config_file=path, hank=hank)
    assert (getattr(resolved.config.budget, attr), resolved.sources[name]) == (
        amount(name, 10),
        "hank overrides",
    )


@pytest.mark.parametrize(("name", "var", "attr"), CEILINGS)
def test_only_the_cli_may_raise_the_hanks_budget_ceiling(name: str, var: str, attr: str) -> None:
    key = name.removeprefix("budget.")
    resolved = resolve_runtime_config(
        cli={name: amount(name, 100.0)},
        env={var: str(amount(name, 50))},
        hank=a_hank(budget={key: amount(name, 0.5)}),
    )
    assert (getattr(resolved.config.budget, attr), resolved.sources[name]) == (
        amount(name, 100.0),
        "cli",
    )


def test_the_cli_may_raise_a_budget_ceiling(tmp_path: Path) -> None:
    path = weft_json(tmp_path, {"budget": {"maxDollars": 5}})
    resolved = resolve_runtime_config(
        cli={"budget.maxDollars": 50.0}, env={}, config_file=path, hank=a_hank()
    )
    assert resolved.config.budget.max_dollars == 50.0
    assert resolved.sources["budget.maxDollars"] == "cli"


def test_environment_values_are_parsed_by_type() -> None:
    env = {
        "WEFT_RUNTIME_SHOW_COSTS": "1",
        "WEFT_RUNTIME_AUTOSTART": "false",
        "WEFT_RUNTIME_PORT": "7777",
        "WEFT_RUNTIME_BUDGET_MAX_DOLLARS": "2.5",
        "WEFT_RUNTIME_SENTINEL_ENABLE_PERSISTENCE": "no",
        "WEFT_RUNTIME_OUTPUT_DIRECTORY": "out",
        "UNRELATED": "x",
    }
    c = resolve_runtime_config(env=env).config
    assert (c.show_costs, c.autostart, c.port, c.budget.max_dollars) == (True, False, 7777, 2.5)
    assert (c.sentinel.enable_persistence, c.output_directory) == (False, "out")


def test_cli_keys_may_be_snake_case_and_none_means_not_given() -> None:
    resolved = resolve_runtime_config(
        cli={"show_costs": True, "idle_timeout": None, "sentinel.wait_for_all_health_checks": True},
        env={},
    )
    assert resolved.config.show_costs is True
    assert resolved.sources["idleTimeout"] == "default"
    assert resolved.config.sentinel.wait_for_all_health_checks is True


def test_all_problems_of_all_layers_are_reported_at_once(tmp_path: Path) -> None:
    path = weft_json(tmp_path, {"prot": 1, "idleTimeout": 999})
    env = {"WEFT_RUNTIME_PORTT": "1", "WEFT_RUNTIME_AUTOSTART": "maybe"}
    with pytest.raises(ConfigError) as raised:
        resolve_runtime_config(cli={"sho_costs": True, "port": -1}, env=env, config_file=path)
    found = {(p.file, p.path, p.code) for p in raised.value.problems}
    assert found == {
        (str(path), "prot", "unknown_key"),
        (str(path), "idleTimeout", "bad_value"),
        ("environment", "WEFT_RUNTIME_PORTT", "unknown_key"),
        ("environment", "WEFT_RUNTIME_AUTOSTART", "bad_value"),
        ("command line", "sho_costs", "unknown_key"),
        ("runtime settings (cli)", "port", "bad_value"),
    }
    hints = {p.path: p.hint for p in raised.value.problems}
    assert hints["prot"] == 'did you mean "port"?'
    assert hints["WEFT_RUNTIME_PORTT"] is not None
    assert "WEFT_RUNTIME_PORT" in hints["WEFT_RUNTIME_PORTT"]


def test_a_broken_or_missing_weft_json_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "weft.json"
    broken.write_text('{"port": 1,}')
    with pytest.raises(ConfigError) as raised:
        resolve_runtime_config(env={}, config_file=broken)
    assert raised.value.problems[0].line == 1
    with pytest.raises(ConfigError):
        resolve_runtime_config(env={}, config_file=tmp_path / "none.json")


def test_every_setting_has_an_environment_variable() -> None:
    env = {}
    for name in setting_names():
        var = "WEFT_RUNTIME_" + "_".join(
            "".join("_" + ch if ch.isupper() else ch.upper() for ch in part).lstrip("_")
            for part in name.split(".")
        )
        env[var] = "1"
    resolved = resolve_runtime_config(env=env)
    assert set(resolved.sources.values()) == {"environment"}


def test_the_reference_page_lists_every_setting_and_its_variable() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "hank-file.md").read_text()
    for name in setting_names():
        assert f"`{name}`" in page, name
    for var in resolve_runtime_config.__globals__["_ENV_NAMES"]:
        assert f"`{var}`" in page, var
