"""Bounded rig copies: a copy never lands inside its own source.

A rig ``copy`` walks its source folder and writes into the execution's
workspace. When the execution lives inside that folder, the walk meets its
own output and copies it again, level after level (a 611-deep tree before the
path got too long, in the fault-injection pass). When the source lies inside
the target, the copy overwrites its source with itself. Both are refused:

* at validation (:func:`executions_inside`, called by the rules): a copied
  folder that holds a Weft execution of this hank is an error, one of another
  hank a warning (it would be copied too);
* when ``weft run`` knows where the execution is, before anything is created
  (:func:`check_copy_bounds`): the execution folder (or the managed base
  folder) inside a copy's source, or a copy's source inside its target;
* and by the rig itself, defensively, just before copying
  (:mod:`weft.runtime.rig.setup`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from weft.config.problems import ConfigProblem, format_path
from weft.config.schema import CopyOp, Loop
from weft.paths import contains
from weft.terminal import printable

if TYPE_CHECKING:
    from weft.config.loader import LoadedHank

__all__ = ["MAX_SCANNED_DIRS", "check_copy_bounds", "executions_inside"]

MAX_SCANNED_DIRS = 5000
"""How many folders of a copy source validation looks through for executions:
enough for any rig template, and a bound on the time a huge source costs."""

_WEFT_DIR = ".weft"
_META_FILE = "execution-meta.json"
_SKIPPED = frozenset({".git", "node_modules"})


def executions_inside(source: Path) -> Iterator[tuple[Path, str | None]]:
    """The Weft executions in the folder ``source``, with the hank file each runs
    (``None`` when its metadata is unreadable). Looks at :data:`MAX_SCANNED_DIRS`
    folders at most and follows no links."""
    for seen, (folder, dirs, _files) in enumerate(os.walk(source), start=1):
        if seen > MAX_SCANNED_DIRS:
            return
        here = Path(folder)
        if _WEFT_DIR in dirs:
            meta = here / _WEFT_DIR / _META_FILE
            if meta.is_file():
                try:
                    hank = orjson.loads(meta.read_bytes()).get("hankPath")
                except (OSError, orjson.JSONDecodeError, AttributeError):
                    hank = None
                yield here, hank if isinstance(hank, str) else None
        dirs[:] = sorted(d for d in dirs if d != _WEFT_DIR and d not in _SKIPPED)


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def _copies(loaded: LoadedHank) -> Iterator[tuple[tuple[str | int, ...], str, int, CopyOp]]:
    """Every rig copy: its codon's JSON path, the codon's label, its index, the op."""
    for i, item in enumerate(loaded.hank.hank):
        if isinstance(item, Loop):
            for j, codon in enumerate(item.codons):
                label = f'loop "{item.id}" > codon "{codon.id}"'
                for k, op in enumerate(codon.rig_setup):
                    if isinstance(op, CopyOp):
                        yield ("hank", i, "codons", j), label, k, op
        else:
            for k, op in enumerate(item.rig_setup):
                if isinstance(op, CopyOp):
                    yield ("hank", i), f'codon "{item.id}"', k, op


def check_copy_bounds(
    loaded: LoadedHank, *, execution: Path, workspace: Path | None = None
) -> list[ConfigProblem]:
    """The rig copies of ``loaded`` that would not stay bounded for an execution
    at ``execution`` (the execution folder, or the base folder new executions
    are made in) whose workspace is ``workspace`` (when known)."""
    problems: list[ConfigProblem] = []
    file = _display(loaded.path)
    for item, label, k, op in _copies(loaded):
        source = loaded.directory / op.copy.from_
        target = workspace / op.copy.to if workspace is not None else None
        if contains(source, execution):
            key, message = (
                "from",
                (
                    f'the copy source "{printable(op.copy.from_)}" holds the execution folder '
                    f"{printable(str(execution))}: the copy would copy itself without end"
                ),
            )
            hint = "put the execution outside the copied folder (weft run --execution DIR)"
        elif target is not None and contains(target, source):
            key, message = (
                "to",
                (
                    f'the copy source "{printable(op.copy.from_)}" lies inside its target '
                    f'"{printable(op.copy.to)}" in the workspace: the copy would overwrite '
                    "its source"
                ),
            )
            hint = "copy to a folder beside the source, or move the hank out of the workspace"
        else:
            continue
        path = (*item, "rigSetup", k, "copy", key)
        problems.append(
            ConfigProblem(
                file=file,
                path=format_path(path),
                message=message,
                code="unbounded_copy",
                item=format_path(item),
                where=label,
                hint=hint,
            )
        )
    return problems
