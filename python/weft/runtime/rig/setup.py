"""Rig setup: a codon's ``rigSetup`` operations, run in order before its agent starts.

:func:`run_rig` runs ``copy`` and ``command`` operations and returns a
:class:`RigResult`; it never raises for a failing operation (only for a
cancellation, and :class:`~weft.errors.StorageFullError` when a copy finds
the disk full: that ends the run, however the operation is configured).
What it guarantees:

**copy** ``{from, to}``: ``from`` is relative to the hank's folder and must
stay inside it: no absolute path, no ``..``, no symlink on the way, not the
folder itself, nothing inside ``.git``/``.weft``. ``to`` is relative to the
workspace (``agentRoot``) and must stay inside it: no absolute path, no
``..``, no ``.git``/``.weft`` component, not into ``read_only_data_source``,
and no symlink on the way (an existing symlink at a file's own target is
replaced, never written through). A copy whose target lies inside its source
(the execution inside the copied folder) or whose source lies inside its
target is refused before anything is written. A file is copied to exactly ``to``; a
folder is merged into ``to``. Modes and times are preserved. Inside a copied
folder:

* ``.git``, ``.weft`` and ``.weft.backup-*`` are never copied;
* the ignore rules are the hank folder's ``.gitignore`` when it has one, else
  the reference runtime's defaults ``node_modules/``, ``dist/``, ``*.log``;
  a ``.gitignore`` inside the copied tree adds rules for its own subtree,
  as in git (it is copied too). Patterns follow gitignore: ``!`` negation,
  ``/`` anchoring, trailing ``/`` for folders, ``*``, ``?``, ``[...]``, ``**``.
  The source named by ``from`` is always copied, even if a rule matches it;
* a symlink is recreated only when its target is relative and stays inside
  the copied folder; any other symlink, FIFO, socket or device fails the copy.

Ignored entries are reported in the operation result and as one ``info``
event. After a successful copy, ``to`` is ``lastCopied``. Copying runs in a
worker thread; a cancelled rig stops it at the next file and waits for it.

**command** ``{run, workingDirectory}``: ``/bin/sh -c run`` in the workspace,
or in ``lastCopied`` (its folder when it is a file), with ``env`` (default:
this process's environment), stdin from ``/dev/null``, in a new process
group. When the shell exits, whatever it left running in its group is
killed, so nothing from the rig outlives it (start a service with ``setsid``
to keep it). Each command's group is journaled (``process.started`` when it
starts, ``process.ended`` once it is gone) with a mark in its environment,
so the next ``weft run`` ends what a killed Weft left of it
(:mod:`weft.runtime.run.survivors`); the shell itself dies with Weft (Linux).
A command that outlives ``command_timeout`` gets SIGTERM, then SIGKILL after
``kill_grace``; a cancelled :func:`run_rig` does the same before it re-raises.

**Output** is streamed as ``rig.output`` events, ``{stream, line, lines,
commandIndex[, droppedLines][, codonId]}``, where ``line`` may hold several
lines joined by ``\\n`` (see :class:`OutputLimits`): lines of a stream are
coalesced for ``interval`` (100 ms), an event carries at most ``event_bytes``
(the newest lines win; the others are counted in ``droppedLines``), and after
``streamed_bytes`` per command only the latest line of each stream is sent,
once per ``trickle_interval``. So a command printing without pause costs the
journal about ``streamed_bytes`` (1 MiB) plus one line per stream per second,
and Weft reads a flood at pipe speed without decoding every line. The last
``tail_bytes`` of output are kept for the failure reason.

**Failures**: an operation fails with ``failureType`` ``command_failed``
(non-zero exit or a signal), ``timeout`` or ``other`` (a copy error, a
command that could not start). Each failure is emitted as
``rig.setup.failed`` ``{failureType, operationType, commandIndex, ignored,
message[, exitCode][, codonId]}``. With ``allowFailure`` (or
``ignore_failures``) the rig goes on; otherwise it stops and
:attr:`RigResult.failure` describes the operation, with
:attr:`RigResult.reason` ready for the codon's failure reason. Operation
numbers in messages count from 1; ``index``/``commandIndex`` from 0 (the
position in ``rigSetup``).

The parts, one job each: :mod:`~weft.runtime.rig.copy` (a copy, with
:mod:`~weft.runtime.rig.ignore` for the ignore rules),
:mod:`~weft.runtime.rig.command` (a command in its own process group),
:mod:`~weft.runtime.rig.output` (output into events),
:mod:`~weft.runtime.rig.results` (what is reported); this module runs the
operations in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from weft.config.schema import CommandOp, CopyOp
from weft.events.stream import InfoEvent, RigSetupFailedEvent
from weft.runtime.rig.command import CommandSettings, command_label, run_command
from weft.runtime.rig.copy import CopyError, run_copy
from weft.runtime.rig.ignore import DEFAULT_IGNORES, IgnoreRules
from weft.runtime.rig.output import OutputLimits
from weft.runtime.rig.results import Emit, RigOpResult, RigResult

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "DEFAULT_IGNORES",
    "KILL_GRACE",
    "Emit",
    "IgnoreRules",
    "OutputLimits",
    "RigOpResult",
    "RigResult",
    "run_rig",
]

DEFAULT_COMMAND_TIMEOUT = 1800.0
"""Seconds a rig command may run (generous: dependency installs can be slow)."""
KILL_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL when a command is stopped."""
IGNORED_IN_EVENT = 20
"""Ignored entries named in a copy's ``info`` event (the rest are counted)."""


async def run_rig(
    ops: Sequence[CopyOp | CommandOp],
    *,
    hank_dir: Path,
    workspace: Path,
    emit: Emit,
    ignore_failures: bool = False,
    env: Mapping[str, str] | None = None,
    codon_id: str | None = None,
    command_timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
    kill_grace: float = KILL_GRACE,
    limits: OutputLimits | None = None,
) -> RigResult:
    """Runs ``ops`` in order (see the module docstring) and says how it went.

    ``hank_dir`` is the folder of the hank file, ``workspace`` the agent's
    working directory (it must exist). ``env`` is the commands' whole
    environment (default: this process's). ``codon_id``, when given, is added
    to every event. ``command_timeout`` ``None`` means no limit.
    """
    hank_dir = Path(hank_dir).absolute()
    workspace = Path(workspace).absolute()
    extra = {} if codon_id is None else {"codonId": codon_id}
    settings = CommandSettings(
        env=dict(os.environ if env is None else env),
        emit=emit,
        extra=extra,
        limits=limits or OutputLimits(),
        timeout=command_timeout,
        kill_grace=kill_grace,
    )
    started = time.monotonic()
    results: list[RigOpResult] = []
    last_copied: Path | None = None
    last_copied_dir: Path | None = None
    failure: RigOpResult | None = None
    for index, op in enumerate(ops):
        if isinstance(op, CopyOp):
            label = f'"{op.copy.from_}" -> "{op.copy.to}"'
            result = await _copy_op(op, index, label, hank_dir, workspace, emit, extra)
            if result.ok:
                last_copied, last_copied_dir = result.target, result.cwd
        else:
            result = await _command_op(
                op, index, workspace=workspace, last_copied=last_copied_dir, settings=settings
            )
        if not result.ok:
            result = _report_failure(result, op, index, ignore_failures, emit, extra)
            results.append(result)
            if not result.failure_ignored:
                failure = result
                break
            continue
        results.append(result)
    return RigResult(
        operations=tuple(results),
        failure=failure,
        last_copied=last_copied,
        duration=time.monotonic() - started,
    )


def _report_failure(
    result: RigOpResult,
    op: CopyOp | CommandOp,
    index: int,
    ignore_failures: bool,
    emit: Emit,
    extra: Mapping[str, Any],
) -> RigOpResult:
    """Emits ``rig.setup.failed`` for a failed operation; the result, marked when ignored."""
    ignored = op.allow_failure or ignore_failures
    if ignored:
        result = dataclasses.replace(result, failure_ignored=True)
    emit(
        RigSetupFailedEvent(
            failure_type=result.failure_type or "other",
            operation_type=result.type,
            command_index=index,
            ignored=ignored,
            message=result.message or "",
            codon_id=extra.get("codonId"),
            exit_code=result.exit_code,
        )
    )
    return result


async def _command_op(
    op: CommandOp,
    index: int,
    *,
    workspace: Path,
    last_copied: Path | None,
    settings: CommandSettings,
) -> RigOpResult:
    started = time.monotonic()
    label = command_label(op.command.run)
    cwd = workspace
    if op.command.working_directory == "lastCopied":
        if last_copied is None:
            return RigOpResult.other_failure(
                index,
                "command",
                label,
                'workingDirectory is "lastCopied" but no copy succeeded before it',
                duration=0.0,
            )
        cwd = last_copied
    outcome = await run_command(op, index, cwd=cwd, settings=settings)
    return RigOpResult(
        index=index,
        type="command",
        label=label,
        ok=outcome.failure_type is None,
        duration=time.monotonic() - started,
        failure_type=outcome.failure_type,
        message=outcome.message,
        exit_code=outcome.exit_code,
        output_tail=outcome.tail,
        cwd=cwd,
    )


async def _copy_op(
    op: CopyOp,
    index: int,
    label: str,
    hank_dir: Path,
    workspace: Path,
    emit: Emit,
    extra: Mapping[str, Any],
) -> RigOpResult:
    started = time.monotonic()
    cancel = threading.Event()
    job = asyncio.ensure_future(asyncio.to_thread(run_copy, op, hank_dir, workspace, cancel))
    try:
        target, is_dir, stats = await asyncio.shield(job)
    except asyncio.CancelledError:
        if not job.done():
            # The thread cannot be interrupted; it stops at the next file and
            # the caller only regains control once it has.
            cancel.set()
            with contextlib.suppress(BaseException):
                await job
        raise
    except CopyError as e:
        return RigOpResult.other_failure(
            index, "copy", label, str(e), duration=time.monotonic() - started
        )
    ignored = tuple(stats.ignored or ())
    if ignored:
        _report_ignored(ignored, index, label, emit, extra)
    return RigOpResult(
        index=index,
        type="copy",
        label=label,
        ok=True,
        duration=time.monotonic() - started,
        target=target,
        cwd=target if is_dir else target.parent,
        files_copied=stats.files,
        bytes_copied=stats.bytes,
        ignored=ignored,
    )


def _report_ignored(
    ignored: tuple[str, ...], index: int, label: str, emit: Emit, extra: Mapping[str, Any]
) -> None:
    """One ``info`` event naming what a copy's ignore rules skipped (the first few)."""
    shown = ", ".join(ignored[:IGNORED_IN_EVENT])
    more = f" and {len(ignored) - IGNORED_IN_EVENT} more" if len(ignored) > IGNORED_IN_EVENT else ""
    emit(
        InfoEvent(
            message=f"Rig copy {label}: {len(ignored)} ignored "
            f"entr{'y' if len(ignored) == 1 else 'ies'} not copied: {shown}{more}",
            command_index=index,
            codon_id=extra.get("codonId"),
        )
    )
