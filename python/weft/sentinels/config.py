"""Sentinel configs: a file on its own, and the entries of a codon.

The config's shape is :class:`weft.config.schema.SentinelConfig` (one
definition, shared with the hank loader); its cross-field rules are
:func:`weft.config.rules.check_sentinel_config`. This module adds what the
sentinels need around them:

* :func:`load_sentinel_config`: one config file (as ``weft validate`` would
  check it), with every problem listed in a :class:`~weft.errors.ConfigError`;
* :func:`attach`: a codon's ``sentinels`` entries as
  :class:`~weft.sentinels.manager.AttachedSentinel` values, the file
  references resolved through the configs the hank loader already checked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from weft.config.rules import RuleContext, load_sentinel_file
from weft.config.schema import Codon, SentinelConfig, SentinelEntry
from weft.config.walk import Sink
from weft.errors import ConfigError
from weft.sentinels.manager import AttachedSentinel, LoadFailure

__all__ = ["attach", "attach_entry", "load_sentinel_config"]


def load_sentinel_config(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> SentinelConfig:
    """Reads and checks one sentinel config file.

    File references inside it (prompt files, a schema file) resolve against
    its own folder and must stay inside it. Raises
    :class:`~weft.errors.ConfigError` listing every problem with its JSON path.
    """
    target = Path(path).resolve()
    sink = Sink(os.fspath(path))
    ctx = RuleContext(
        sink=sink,
        root=target.parent,
        display_dir=os.path.dirname(os.fspath(path)),
        env=dict(os.environ if env is None else env),
        check_environment=False,
    )
    config = load_sentinel_file(target, sink, ctx)
    errors = [p for p in sink.problems if p.is_error]
    if config is None or errors:
        raise ConfigError(sink.problems)
    return config


def attach(
    codon: Codon,
    hank_dir: Path,
    configs: Mapping[Path, SentinelConfig],
    resolved: dict[str, Path] | None = None,
) -> tuple[list[AttachedSentinel], list[LoadFailure]]:
    """The sentinels of ``codon``, ready for
    :meth:`~weft.sentinels.manager.SentinelManager.load`, and those whose
    config file did not pass validation (``configs`` holds only the ones that
    did: :attr:`weft.config.loader.LoadedHank.sentinel_configs`). ``resolved``
    keeps each reference's resolved path for the next codons of a run."""
    attached: list[AttachedSentinel] = []
    failures: list[LoadFailure] = []
    for entry in codon.sentinels:
        one = attach_entry(entry, hank_dir, configs, resolved)
        if isinstance(one, LoadFailure):
            failures.append(one)
        else:
            attached.append(one)
    return attached, failures


def attach_entry(
    entry: SentinelEntry,
    hank_dir: Path,
    configs: Mapping[Path, SentinelConfig],
    resolved: dict[str, Path] | None = None,
) -> AttachedSentinel | LoadFailure:
    """One entry of :func:`attach`."""
    ref = entry.sentinel_config
    required = bool(entry.settings and entry.settings.fail_codon_if_not_loaded)
    if isinstance(ref, SentinelConfig):
        return AttachedSentinel(ref, entry.settings, hank_dir, "inline", None)
    target = None if resolved is None else resolved.get(ref)
    if target is None:
        target = (hank_dir / ref).resolve()
        if resolved is not None:
            resolved[ref] = target
    config = configs.get(target)
    if config is None:
        return LoadFailure(
            Path(ref).stem,
            f'sentinel config "{ref}" is invalid or missing (run `weft validate`)',
            required,
        )
    return AttachedSentinel(config, entry.settings, target.parent, "file", ref)
