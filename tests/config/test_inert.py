"""Settings Weft accepts for compatibility but cannot honour are named, never silently kept."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from weft.config.inert import INERT_SETTINGS, inert_settings
from weft.config.runtime import RuntimeConfig, resolve_runtime_config, setting_names

ROOT = Path(__file__).resolve().parents[2] / "python" / "weft"

# A value for each inert setting that asks for what Weft does not do.
ASKING = {
    "showCosts": True,
    "withoutProxy": False,
    "logParsingInterval": 100,
    "dietOnFinalize": False,
    "journalDietThresholdBytes": 1024,
    "sentinel.healthCheckGracePeriodMs": 5000,
    "sentinel.waitForAllHealthChecks": True,
}


def test_defaults_are_quiet() -> None:
    assert inert_settings(RuntimeConfig()) == []


@pytest.mark.parametrize("setting", [s.name for s in INERT_SETTINGS])
def test_each_inert_setting_set_by_a_user_is_named_with_its_reason(setting: str) -> None:
    assert setting in ASKING, f"give {setting} a value in ASKING"
    resolved = resolve_runtime_config(cli={setting: ASKING[setting]}, env={})
    (line,) = inert_settings(resolved.config)
    assert line.startswith(f"{setting} has no effect: ")


def _snake(dotted: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", dotted.split(".")[-1]).lower()


def test_every_runtime_setting_is_read_by_weft_or_declared_inert() -> None:
    """A setting nobody reads and nobody declares inert would be accepted and ignored."""
    inert = {s.name for s in INERT_SETTINGS}
    sources = "\n".join(
        p.read_text()
        for p in ROOT.rglob("*.py")
        if p.name not in ("runtime.py", "inert.py") or p.parent.name != "config"
    )
    unread = [
        name
        for name in setting_names()
        if name not in inert and not re.search(rf"\.{_snake(name)}\b", sources)
    ]
    assert unread == []


def test_the_table_names_only_real_settings() -> None:
    assert {s.name for s in INERT_SETTINGS} <= set(setting_names())
    assert msgspec.structs.fields(RuntimeConfig)
