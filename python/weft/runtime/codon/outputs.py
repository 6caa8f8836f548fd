"""Output files: what a codon's ``outputFiles`` copy out of the workspace when it succeeds.

A codon's ``outputFiles`` is a list of steps ``{copy: [globs], beforeCopy: [commands]}``.
When the codon succeeds and an output directory is set (``weft run -o DIR``,
``outputDirectory`` in weft.json), each step runs its ``beforeCopy`` commands in
the workspace (with the codon's ``env``, their output streamed as ``rig.output``
like rig commands), then copies every file its globs match, keeping the path
relative to the workspace, into the output directory. Without an output
directory nothing is copied, and ``weft validate`` and the run's opening say so.

The rules, as the reference runtime has them:

* globs are relative to the workspace (``**`` crosses folders); a glob that
  names a folder copies the files under it. Nothing outside the workspace is
  copied: no ``..`` or absolute pattern, no symlink leading out, and never
  ``read_only_data_source`` (the input data) unless a glob names it;
* a file that already exists in the output directory is kept, and the new one
  is written beside it as ``<name>_<counter>_<timestamp><ext>`` (the first free
  counter of 1..100; after that the copy fails, asking for
  ``--overwrite-output``). With ``--overwrite-output`` it is replaced;
* a ``beforeCopy`` command that fails is reported (an ``error`` event) and the
  copy goes on, as in the reference; a copy that fails fails the codon (the run
  then ends with exit 1 unless the codon's ``onFailure`` says otherwise).

:func:`copy_outputs` does one codon's steps; the file work runs in a worker
thread. Why before the completion checkpoint: what ``beforeCopy`` changes in the
workspace is then part of the codon's checkpoint, so a rollback sees it.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from weft.config.schema import CommandOp, OutputFiles, RigCommand
from weft.errors import WeftError
from weft.events.stream import ErrorEvent, InfoEvent
from weft.runtime.execution.layout import DATA_LINK
from weft.runtime.rig.command import CommandSettings, command_label, run_command
from weft.runtime.rig.output import OutputLimits
from weft.runtime.rig.results import Emit
from weft.runtime.rig.setup import DEFAULT_COMMAND_TIMEOUT, KILL_GRACE

__all__ = ["MAX_RENAME_TRIES", "OutputError", "OutputResult", "copy_outputs", "free_name"]

MAX_RENAME_TRIES = 100
"""Counters tried for a conflicting file's new name (the reference's limit)."""
_NEVER = frozenset({".git", ".weft"})
"""Top-level workspace entries no glob copies out."""


class OutputError(WeftError):
    """A copy that could not be made: the message says which file and why."""


@dataclass(slots=True)
class OutputResult:
    """What one codon's output steps did."""

    copied: list[str] = field(default_factory=list)
    """Output-relative paths written."""
    renamed: list[tuple[str, str]] = field(default_factory=list)
    """(wanted, written) for the files kept beside an existing one."""
    failed_commands: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the copy failed (the codon then fails); None when it did not."""


async def copy_outputs(
    steps: Sequence[OutputFiles],
    *,
    workspace: Path,
    output_dir: Path,
    overwrite: bool,
    env: Mapping[str, str],
    emit: Emit,
    codon_id: str,
    command_timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
) -> OutputResult:
    """Runs ``steps`` (see the module docstring) and says what was copied."""
    result = OutputResult()
    settings = CommandSettings(
        env=dict(env),
        emit=emit,
        extra={"codonId": codon_id},
        limits=OutputLimits(),
        timeout=command_timeout,
        kill_grace=KILL_GRACE,
    )
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    for number, step in enumerate(steps, start=1):
        for index, shell in enumerate(step.before_copy):
            op = CommandOp(command=RigCommand(run=shell.command.run))
            outcome = await run_command(op, index, cwd=workspace, settings=settings)
            if outcome.failure_type is not None:
                label = command_label(shell.command.run)
                message = (
                    f"beforeCopy command {index + 1} of outputFiles[{number - 1}] of {codon_id} "
                    f"({label}) failed: {outcome.message}; copying goes on"
                )
                result.failed_commands.append(message)
                emit(ErrorEvent(message=message, codon=codon_id, severity="codon"))
        try:
            await asyncio.to_thread(
                _copy_step, step.copy, workspace, output_dir, overwrite, stamp, result
            )
        except (OutputError, OSError) as exc:
            result.error = f"outputFiles of {codon_id}: {exc}"
            return result
    renamed = "".join(
        f"; {wanted} exists, written as {written}" for wanted, written in result.renamed
    )
    emit(
        InfoEvent(
            message=f"Copied {len(result.copied)} output file(s) of {codon_id} to "
            f"{output_dir}{renamed}"
        )
    )
    return result


def _copy_step(
    patterns: Sequence[str],
    workspace: Path,
    output_dir: Path,
    overwrite: bool,
    stamp: str,
    result: OutputResult,
) -> None:
    root = workspace.resolve()
    for relative in _matches(patterns, root):
        source = root / relative
        real = source.resolve()
        if root != real and root not in real.parents:
            raise OutputError(f"{relative} leads out of the workspace (a symlink); not copied")
        target = output_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() and not overwrite:
            free = free_name(target, stamp)
            result.renamed.append((relative, str(free.relative_to(output_dir))))
            target = free
        shutil.copy2(real, target)
        result.copied.append(str(target.relative_to(output_dir)))


def _matches(patterns: Sequence[str], root: Path) -> list[str]:
    """The workspace-relative files ``patterns`` match, sorted, each once."""
    found: dict[str, None] = {}
    for pattern in patterns:
        pure = PurePosixPath(pattern)
        if pure.is_absolute() or ".." in pure.parts:
            raise OutputError(f"the glob {pattern!r} leaves the workspace (no '..' or '/...')")
        names_data = pure.parts[:1] == (DATA_LINK,)
        for match in sorted(glob.glob(pattern, root_dir=root, recursive=True)):
            top = PurePosixPath(match).parts[0]
            if top in _NEVER or (top == DATA_LINK and not names_data):
                continue
            path = root / match
            if path.is_dir():
                for dirpath, _dirs, files in os.walk(path):
                    for name in sorted(files):
                        found.setdefault(str((Path(dirpath) / name).relative_to(root)))
            elif path.is_file():
                found.setdefault(match)
    return sorted(found)


def free_name(target: Path, stamp: str) -> Path:
    """``<stem>_<counter>_<stamp><suffix>`` beside ``target``: the first that does not exist.

    Raises :class:`OutputError` after :data:`MAX_RENAME_TRIES` counters.
    """
    for counter in range(1, MAX_RENAME_TRIES + 1):
        candidate = target.with_name(f"{target.stem}_{counter}_{stamp}{target.suffix}")
        if not candidate.exists():
            return candidate
    raise OutputError(
        f"{target} exists and so do {MAX_RENAME_TRIES} renamed copies; empty the output "
        "directory or pass --overwrite-output"
    )
