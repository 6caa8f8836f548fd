"""Runtime settings Weft accepts but that change nothing here, and why.

Hankweave's ``hankweave.json`` files and hank ``overrides`` must load on Weft
unchanged, so these keys are accepted rather than refused. Accepting a key
and silently doing nothing would be worse than refusing it, so every such
key set away from its default is named, with the reason, at ``weft run``'s
start (and, for the hank's own ``overrides``, by ``weft validate``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from weft.config.runtime import RuntimeConfig

__all__ = ["INERT_SETTINGS", "InertSetting", "inert_settings"]


@dataclass(frozen=True, slots=True)
class InertSetting:
    """A setting with no effect on Weft while ``is_set`` holds."""

    name: str
    """Its dotted name (``sentinel.waitForAllHealthChecks``)."""
    is_set: Callable[[RuntimeConfig], bool]
    """Whether the settings in force ask for what Weft does not do."""
    reason: str


INERT_SETTINGS: tuple[InertSetting, ...] = (
    InertSetting(
        "showCosts",
        lambda c: c.show_costs,
        "Weft's views always show costs",
    ),
    InertSetting(
        "withoutProxy",
        lambda c: not c.without_proxy,
        "Weft runs agents without a proxy; to route Claude Code through one, set anthropicBaseUrl",
    ),
    InertSetting(
        "logParsingInterval",
        lambda c: c.log_parsing_interval != 1000,
        "Weft reads the agent's output stream as it is written, not by polling a log",
    ),
    InertSetting(
        "dietOnFinalize",
        lambda c: not c.diet_on_finalize,
        "Weft's journal keeps no large bodies to move aside, so there is no diet to switch off",
    ),
    InertSetting(
        "journalDietThresholdBytes",
        lambda c: c.journal_diet_threshold_bytes != 4096,
        "Weft's journal keeps no large bodies to move aside, so there is no diet threshold",
    ),
    InertSetting(
        "sentinel.healthCheckGracePeriodMs",
        lambda c: c.sentinel.health_check_grace_period_ms != 2000,
        "Weft loads a codon's sentinels before its agent starts, so there is no health "
        "check to wait for",
    ),
    InertSetting(
        "sentinel.waitForAllHealthChecks",
        lambda c: c.sentinel.wait_for_all_health_checks,
        "Weft loads a codon's sentinels before its agent starts, so there is no health "
        "check to wait for",
    ),
)
"""Every setting Weft accepts only for compatibility; the test of this module
checks that each one is set away from its default by some value."""


def inert_settings(config: RuntimeConfig) -> list[str]:
    """One line per setting in force that has no effect on Weft, with why."""
    return [f"{s.name} has no effect: {s.reason}" for s in INERT_SETTINGS if s.is_set(config)]
