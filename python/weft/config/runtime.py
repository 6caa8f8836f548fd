"""Runtime settings and their layers.

A setting's value comes from the highest layer that sets it::

    defaults  <  weft.json  <  the hank's "overrides"  <  WEFT_RUNTIME_* variables  <  CLI flags

(the reference runtime's order, with Weft's names for the file and the
variables). One exception, also the reference's: the run's budget ceilings
(``budget.maxDollars``, ``budget.maxTimeSeconds``, ``budget.maxTokens``) take the
*smaller* of the runtime config (``WEFT_RUNTIME_BUDGET_*``, else weft.json) and
the hank's ``overrides.budget`` unless a CLI flag sets them.

:func:`resolve_runtime_config` returns the settings and, for each, the layer
it came from, so ``weft validate`` and the logs can say why a value is what
it is. Every setting has a dotted name: its JSON name in weft.json, with a
dot for nesting (``port``, ``sentinel.enablePersistence``,
``budget.maxDollars``). An environment variable is that name in upper snake
case after ``WEFT_RUNTIME_`` (``WEFT_RUNTIME_SHOW_COSTS=1``,
``WEFT_RUNTIME_SENTINEL_ENABLE_PERSISTENCE=false``,
``WEFT_RUNTIME_BUDGET_MAX_DOLLARS=2.5``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import Meta
from msgspec import inspect as mi

from weft.config.hints import did_you_mean
from weft.config.problems import ConfigProblem
from weft.config.schema import Hank
from weft.config.walk import Sink, check_value
from weft.errors import ConfigError
from weft.terminal import plural

__all__ = [
    "ENV_PREFIX",
    "LAYERS",
    "RUNTIME_CONFIG_FILE",
    "Layer",
    "ResolvedRuntimeConfig",
    "RuntimeBreakerSettings",
    "RuntimeBudget",
    "RuntimeConfig",
    "RuntimeSentinelSettings",
    "RuntimeSessionSettings",
    "RuntimeUsageWindowSettings",
    "resolve_runtime_config",
    "setting_names",
]

RUNTIME_CONFIG_FILE = "weft.json"
ENV_PREFIX = "WEFT_RUNTIME_"

Layer = Literal["default", "weft.json", "hank overrides", "environment", "cli"]
LAYERS: tuple[Layer, ...] = ("default", "weft.json", "hank overrides", "environment", "cli")
"""From lowest to highest precedence."""


class _Settings(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    """Base of the runtime settings objects."""


class RuntimeSentinelSettings(_Settings, frozen=True, kw_only=True):
    """Settings of the sentinel system."""

    enable_persistence: bool = True
    health_check_grace_period_ms: Annotated[int, Meta(gt=0)] = 2000
    wait_for_all_health_checks: bool = False
    model: Annotated[str, Meta(min_length=1)] | None = None
    """Overrides the model of every sentinel (``--sentinel-model``; ``fake/haiku`` offline)."""
    call_timeout_ms: Annotated[int, Meta(ge=1, le=3_600_000)] = 60_000
    """The longest one sentinel model call may take, answer streamed or not; a
    call still going then fails as a retriable ``timeout``."""


class RuntimeBudget(_Settings, frozen=True, kw_only=True):
    """Ceilings of a whole run."""

    max_dollars: Annotated[float, Meta(gt=0)] | None = None
    max_time_seconds: Annotated[float, Meta(gt=0)] | None = None
    max_tokens: Annotated[int, Meta(gt=0)] | None = None
    """Every token of every attempt (input, output, cache writes and reads)."""


class RuntimeSessionSettings(_Settings, frozen=True, kw_only=True):
    """The session supervisor of every codon (seed 002): how long a transient
    failure cools down before the session is resumed, and when it gives up."""

    max_consecutive_errors: Annotated[int, Meta(ge=1, le=1_000_000)] = 5
    """Failures in a row, with no session started between them, that fail the codon."""
    max_total_errors: Annotated[int, Meta(ge=1, le=1_000_000)] = 20
    """Failures in one codon attempt that fail it."""
    backoff_base_ms: Annotated[int, Meta(ge=0)] = 2000
    """The first cool-down; each failure in a row doubles it."""
    backoff_max_ms: Annotated[int, Meta(ge=0)] = 60000
    """The longest cool-down the schedule reaches."""
    max_retry_after_ms: Annotated[int, Meta(ge=0)] = 3_600_000
    """Retry-After hints longer than this are ignored as implausible."""


class RuntimeBreakerSettings(_Settings, frozen=True, kw_only=True):
    """The circuit breaker of each agent provider (seed 004), shared by the
    codons of a run: transient provider failures in a row open it, codons wait
    out its cool-down, then one probe session decides."""

    failure_threshold: Annotated[int, Meta(ge=1, le=1_000_000)] = 5
    """Provider failures in a row (across codons) that open the breaker."""
    cooldown_ms: Annotated[int, Meta(ge=0)] = 60000
    """How long an open breaker holds codons back before one probe session."""
    success_threshold: Annotated[int, Meta(ge=1, le=1_000_000)] = 1
    """Probe successes that close a half-open breaker."""


class RuntimeUsageWindowSettings(_Settings, frozen=True, kw_only=True):
    """Waiting for a subscription's usage window (:mod:`weft.windows`): a codon
    whose provider refuses sessions until a named time parks until then."""

    margin_ms: Annotated[int, Meta(ge=0, le=3_600_000)] = 10_000
    """Waited past the time the provider names, for clock differences."""
    max_wait_ms: Annotated[int, Meta(ge=0)] = 7 * 24 * 3_600_000
    """The longest a codon waits for a window (a week, the longest window);
    one that opens later fails the codon."""


class RuntimeConfig(_Settings, frozen=True, kw_only=True):
    """Weft's runtime settings (the reference's hankweave.json keys, in weft.json)."""

    port: Annotated[int, Meta(ge=0, le=65535, description="WebSocket port; 0 picks one.")] = 0
    autostart: bool = True
    show_costs: bool = False
    without_proxy: bool = True
    model: Annotated[str, Meta(min_length=1)] | None = None
    """Overrides the model of every codon (``--model``)."""
    anthropic_base_url: str | None = None
    output_directory: str | None = None
    execution_base_dir: str = "~/.weft-executions"
    log_parsing_interval: Annotated[int, Meta(gt=0)] = 1000
    data_hash_time_limit: Annotated[int, Meta(gt=0)] = 5000
    idle_timeout: Annotated[int, Meta(ge=0, le=255)] = 0
    shim_idle_timeout: Annotated[int, Meta(ge=1, le=1800)] | None = None
    diet_on_finalize: bool = True
    journal_diet_threshold_bytes: Annotated[int, Meta(gt=0)] = 4096
    ignore_rig_failures: bool = False
    telemetry: bool = False
    allow_anonymous_read: bool = False
    """Loopback clients may read the run without a token (``--allow-anonymous-read``)."""
    sentinel: RuntimeSentinelSettings = msgspec.field(default_factory=RuntimeSentinelSettings)
    budget: RuntimeBudget = msgspec.field(default_factory=RuntimeBudget)
    session: RuntimeSessionSettings = msgspec.field(default_factory=RuntimeSessionSettings)
    breaker: RuntimeBreakerSettings = msgspec.field(default_factory=RuntimeBreakerSettings)
    usage_window: RuntimeUsageWindowSettings = msgspec.field(
        default_factory=RuntimeUsageWindowSettings
    )


@dataclass(frozen=True)
class ResolvedRuntimeConfig:
    """The settings in force and the layer each came from."""

    config: RuntimeConfig
    sources: dict[str, Layer]
    """Dotted setting name -> the layer its value came from."""
    config_file: Path | None
    """The weft.json that was read, if any."""

    def value(self, name: str) -> Any:
        """The value of a dotted setting name."""
        node: Any = msgspec.to_builtins(self.config)
        for part in name.split("."):
            node = node[part]
        return node


def _leaves(t: Any, prefix: str = "") -> dict[str, mi.Type]:
    info = t if isinstance(t, mi.StructType) else mi.type_info(t)
    assert isinstance(info, mi.StructType)
    out: dict[str, mi.Type] = {}
    for f in info.fields:
        name = f"{prefix}{f.encode_name}"
        inner = f.type
        if isinstance(inner, mi.StructType):
            out.update(_leaves(inner, f"{name}."))
        else:
            out[name] = inner
    return out


_LEAVES = _leaves(RuntimeConfig)


def setting_names() -> list[str]:
    """Every dotted setting name, in declaration order."""
    return list(_LEAVES)


def _env_name(dotted: str) -> str:
    parts = [re.sub(r"(?<!^)(?=[A-Z])", "_", p).upper() for p in dotted.split(".")]
    return ENV_PREFIX + "_".join(parts)


_ENV_NAMES = {_env_name(n): n for n in _LEAVES}
_SNAKE_NAMES = {
    ".".join(re.sub(r"(?<!^)(?=[A-Z])", "_", p).lower() for p in n.split(".")): n for n in _LEAVES
}


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and not isinstance(_LEAVES.get(name), mi.DictType):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in flat.items():
        node = out
        *parents, last = name.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def _parse_env_value(raw: str, t: mi.Type) -> Any:
    """An environment string as a value of type ``t`` (raises ValueError)."""
    kinds = t.types if isinstance(t, mi.UnionType) else (t,)
    kinds = tuple(k.type if isinstance(k, mi.Metadata) else k for k in kinds)
    if any(isinstance(k, mi.BoolType) for k in kinds):
        lowered = raw.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError("expected true/false or 1/0")
    if any(isinstance(k, mi.IntType) for k in kinds):
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError("expected an integer") from None
    if any(isinstance(k, mi.FloatType) for k in kinds):
        try:
            return float(raw.strip())
        except ValueError:
            raise ValueError("expected a number") from None
    return raw


def _hank_layer(hank: Hank | None) -> dict[str, Any]:
    if hank is None or hank.overrides is None:
        return {}
    overrides: dict[str, Any] = msgspec.to_builtins(hank.overrides)
    flat = {k: v for k, v in _flatten(overrides).items() if v is not None}
    # Only overrides that are runtime settings form this layer; the rest of
    # the hank's budget (allocation, shares) is for the planner.
    return {k: v for k, v in flat.items() if k in _LEAVES}


def resolve_runtime_config(
    *,
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    hank: Hank | None = None,
) -> ResolvedRuntimeConfig:
    """Resolves the runtime settings from all layers.

    ``cli`` maps setting names (dotted JSON names like ``budget.maxDollars``,
    or their snake_case form ``budget.max_dollars``; ``None`` values mean the
    flag was not given) to values. ``env`` defaults to ``os.environ``.
    ``config_file`` is a weft.json to read (a missing file is an error when
    given explicitly; ``None`` reads none). ``hank`` supplies its overrides.

    Raises :class:`weft.errors.ConfigError` for a bad weft.json, an unknown
    or unparsable ``WEFT_RUNTIME_*`` variable, or an unknown CLI setting.
    """
    env = os.environ if env is None else env
    problems: list[ConfigProblem] = []
    layers: dict[Layer, dict[str, Any]] = {name: {} for name in LAYERS}
    layers["default"] = {
        k: v for k, v in _flatten(msgspec.to_builtins(RuntimeConfig())).items() if v is not None
    }
    path = Path(config_file) if config_file is not None else None
    if path is not None:
        layers["weft.json"] = _read_config_file(path, problems)
    layers["hank overrides"] = _hank_layer(hank)
    layers["environment"] = _env_layer(env, problems)
    layers["cli"] = _cli_layer(cli or {}, problems)
    merged, sources = _merge(layers)
    doc = _unflatten(merged)
    sink = Sink("runtime settings", doc)
    check_value(doc, RuntimeConfig, (), sink)
    for problem in sink.problems:
        origin = sources.get(problem.path, "default")
        problems.append(msgspec.structs.replace(problem, file=f"runtime settings ({origin})"))
    if problems:
        raise ConfigError(
            problems, summary=f"invalid runtime settings: {plural(len(problems), 'problem')}"
        )
    config = msgspec.convert(doc, RuntimeConfig)
    return ResolvedRuntimeConfig(config=config, sources=sources, config_file=path)


def _env_layer(env: Mapping[str, str], problems: list[ConfigProblem]) -> dict[str, Any]:
    """The ``WEFT_RUNTIME_*`` variables as settings; unknown or unparsable ones are problems."""
    layer: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        setting = _ENV_NAMES.get(name)
        if setting is None:
            problems.append(
                ConfigProblem(
                    file="environment",
                    path=name,
                    message=f"unknown runtime setting variable {name}",
                    code="unknown_key",
                    hint=did_you_mean(name, _ENV_NAMES)
                    or f"valid: {', '.join(sorted(_ENV_NAMES))}",
                )
            )
            continue
        try:
            layer[setting] = _parse_env_value(raw, _LEAVES[setting])
        except ValueError as e:
            problems.append(
                ConfigProblem(
                    file="environment",
                    path=name,
                    message=f"{e}, got {raw!r}",
                    code="bad_value",
                )
            )
    return layer


def _cli_layer(cli: Mapping[str, Any], problems: list[ConfigProblem]) -> dict[str, Any]:
    """The flags that were given (JSON or snake_case names); an unknown name is a problem."""
    layer: dict[str, Any] = {}
    for key, value in cli.items():
        if value is None:
            continue
        setting = key if key in _LEAVES else _SNAKE_NAMES.get(key)
        if setting is None:
            problems.append(
                ConfigProblem(
                    file="command line",
                    path=key,
                    message=f"unknown runtime setting {key!r}",
                    code="unknown_key",
                    hint=did_you_mean(key, _LEAVES),
                )
            )
            continue
        layer[setting] = value
    return layer


_CEILINGS = tuple(name for name in _LEAVES if name.startswith("budget."))
"""The run's budget ceilings (every ``budget.*`` setting), which the hank's
``overrides.budget`` may lower."""


def _merge(layers: dict[Layer, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Layer]]:
    """Later layers win, except budget ceilings: the stricter of the runtime config
    (the environment, else weft.json) and the hank, unless the CLI says.
    Returns the flat settings and their sources."""
    merged: dict[str, Any] = {}
    sources: dict[str, Layer] = dict.fromkeys(_LEAVES, "default")
    for layer in LAYERS:
        for name, value in layers[layer].items():
            merged[name] = value
            sources[name] = layer
    for name in _CEILINGS:
        # Only a flag may raise the hank's own ceiling (the reference's rule): a
        # WEFT_RUNTIME_BUDGET_* variable is runtime config, like weft.json, and
        # replaces weft.json's value, but the hank's stricter one still wins.
        if name in layers["cli"]:
            continue
        runtime: Layer = "environment" if name in layers["environment"] else "weft.json"
        ceiling_layers: tuple[Layer, ...] = (runtime, "hank overrides")
        candidates = [
            (layers[layer][name], layer)
            for layer in ceiling_layers
            if isinstance(layers[layer].get(name), int | float)
        ]
        if candidates:
            merged[name], sources[name] = min(candidates, key=lambda c: c[0])
    return merged, sources


def _read_config_file(path: Path, problems: list[ConfigProblem]) -> dict[str, Any]:
    display = str(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        problems.append(
            ConfigProblem(
                file=display, path="$", message=f"cannot read: {e.strerror}", code="unreadable"
            )
        )
        return {}
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        problems.append(
            ConfigProblem(
                file=display,
                path="$",
                message=f"invalid JSON: {e.msg}",
                code="bad_json",
                line=e.lineno,
                column=e.colno,
            )
        )
        return {}
    if isinstance(doc, dict):
        doc.pop("$schema", None)
    sink = Sink(display, doc)
    check_value(doc, RuntimeConfig, (), sink)
    if sink.problems:
        problems.extend(sink.in_order())
        return {}
    assert isinstance(doc, dict)
    return _flatten(doc)
