"""Hank files: schema, loading, validation and runtime configuration.

The shape of a hank file is defined once, by the Structs of
:mod:`weft.config.schema`; :func:`load_hank` reads a hank file, checks
everything (reporting every problem at once through
:class:`weft.errors.ConfigError`) and returns a :class:`LoadedHank`.
:mod:`weft.config.runtime` resolves the runtime settings from their layers.
"""

from __future__ import annotations

from weft.config.loader import HankReport, LoadedHank, find_hank_file, load_hank, validate_hank
from weft.config.problems import ConfigProblem
from weft.config.runtime import ResolvedRuntimeConfig, RuntimeConfig, resolve_runtime_config
from weft.config.schema import (
    AnyRigOp,
    Codon,
    CodonBudget,
    CommandOp,
    ContainerBudget,
    ContextExceeded,
    CopyOp,
    Hank,
    HankItem,
    IterationLimit,
    Loop,
    OutputFiles,
    Overrides,
    RetryConfig,
    SentinelConfig,
    SentinelEntry,
    ShellCommand,
    json_schema,
)

# prompt assembly (weft.config.prompt) is exported here by its owner.

__all__ = [
    "AnyRigOp",
    "Codon",
    "CodonBudget",
    "CommandOp",
    "ConfigProblem",
    "ContainerBudget",
    "ContextExceeded",
    "CopyOp",
    "Hank",
    "HankItem",
    "HankReport",
    "IterationLimit",
    "LoadedHank",
    "Loop",
    "OutputFiles",
    "Overrides",
    "ResolvedRuntimeConfig",
    "RetryConfig",
    "RuntimeConfig",
    "SentinelConfig",
    "SentinelEntry",
    "ShellCommand",
    "find_hank_file",
    "json_schema",
    "load_hank",
    "resolve_runtime_config",
    "validate_hank",
]
