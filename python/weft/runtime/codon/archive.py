"""Archives: ``archiveOnSuccess`` paths moved out of the workspace, and back on rollback.

When a codon finishes (completed, skipped, or failed with ``onFailure:
ignore``, as the reference's ``finalizeCodon`` does), each path of its
``archiveOnSuccess`` is moved from the workspace into
``<execution>/rigArchive/<owner>/<path>``; the owner is the codon id, or for a
codon of a loop ``<loopId>-<iteration>/<codonId>-<iteration>``. A loop's own
``archiveOnSuccess`` is archived once, when the loop ends, under
``rigArchive/<loopId>/``. ``rigArchive/`` is outside the workspace, so the
agent no longer sees what was archived, and no checkpoint covers it.

Every move is written down in ``.weft/archive-manifest.json`` (``{version,
entries[]}``, replaced atomically) with the run and codon that made it. A
rollback that undoes that codon moves its paths back into the workspace
(:func:`restore_archives`) *before* the checkpoint is restored, so whatever
the target checkpoint says about those paths wins; a path the codon itself
created and covered is then removed again by the restore, as it would be had
it never been archived.

:func:`archive_paths` makes one archive (blocking: run it in a worker thread);
its :class:`ArchiveOutcome` becomes an ``archive.completed`` or
``archive.partial`` event (:func:`archive_event`). A path that does not exist
is a failed path, not an error of the run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

import msgspec

from weft.clock import utc_now_iso
from weft.config.rules.paths import archive_refusal
from weft.events.stream import (
    ArchiveCompletedEvent,
    ArchiveFailure,
    ArchivePartialEvent,
    RollbackArchiveRestoreEvent,
)
from weft.events.transitions import LoopContext
from weft.runtime.execution.layout import ExecutionLayout

__all__ = [
    "MANIFEST_FILE",
    "ArchiveOutcome",
    "archive_event",
    "archive_paths",
    "codon_owner",
    "read_manifest",
    "restore_archives",
]

MANIFEST_FILE = "archive-manifest.json"
"""In ``.weft/``: every archive made and not yet undone by a rollback."""
MANIFEST_VERSION = "1.0.0"


class ArchivedPath(msgspec.Struct, rename="camel", kw_only=True):
    """One path moved: where it was in the workspace, where it is now (execution-relative)."""

    source: str
    archived: str


class ManifestEntry(msgspec.Struct, rename="camel", kw_only=True):
    """One archive: who made it and what it moved."""

    run_id: str
    codon_id: str
    loop_id: str | None = None
    time: str
    paths: list[ArchivedPath]


class Manifest(msgspec.Struct, kw_only=True):
    version: str = MANIFEST_VERSION
    entries: list[ManifestEntry] = msgspec.field(default_factory=list)


@dataclass(slots=True)
class ArchiveOutcome:
    """What one archive did."""

    codon_id: str
    archive_dir: str
    """Execution-relative folder the paths went to."""
    loop_id: str | None = None
    archived: list[str] = field(default_factory=list)
    failed: list[ArchiveFailure] = field(default_factory=list)


def codon_owner(codon_id: str, loop_context: LoopContext | None) -> str:
    """The folder under ``rigArchive/`` of a codon's archive."""
    if loop_context is None:
        return codon_id
    iteration = loop_context.iteration
    base = codon_id.split("#", 1)[0]
    return f"{loop_context.loop_id}-{iteration}/{base}-{iteration}"


def read_manifest(layout: ExecutionLayout) -> Manifest:
    """The manifest (empty when there is none yet)."""
    path = layout.weft_dir / MANIFEST_FILE
    try:
        return msgspec.json.decode(path.read_bytes(), type=Manifest)
    except FileNotFoundError:
        return Manifest()


def _write_manifest(layout: ExecutionLayout, manifest: Manifest) -> None:
    path = layout.weft_dir / MANIFEST_FILE
    temp = path.with_suffix(".tmp")
    with open(temp, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(manifest)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def archive_paths(
    paths: Sequence[str],
    *,
    layout: ExecutionLayout,
    owner: str,
    run_id: str,
    codon_id: str,
    loop_id: str | None = None,
) -> ArchiveOutcome:
    """Moves ``paths`` (workspace-relative) into ``rigArchive/<owner>/`` and records it."""
    workspace = layout.workspace.resolve()
    folder = layout.rig_archive / owner
    outcome = ArchiveOutcome(
        codon_id=codon_id,
        loop_id=loop_id,
        archive_dir=str(folder.relative_to(layout.root)),
    )
    moved: list[ArchivedPath] = []
    for relative in paths:
        pure = PurePosixPath(relative)
        if pure.is_absolute() or ".." in pure.parts:
            outcome.failed.append(ArchiveFailure(path=relative, error="not inside the workspace"))
            continue
        source = workspace / relative
        if (top := archive_refusal(relative)) is not None:
            outcome.failed.append(ArchiveFailure(path=relative, error=f"would move {top}"))
            continue
        if not source.parent.resolve().is_relative_to(workspace):
            outcome.failed.append(ArchiveFailure(path=relative, error="leads out of the workspace"))
            continue
        if not source.exists() and not source.is_symlink():
            outcome.failed.append(ArchiveFailure(path=relative, error="not found in the workspace"))
            continue
        target = _free(folder / relative)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
        except OSError as exc:
            outcome.failed.append(ArchiveFailure(path=relative, error=exc.strerror or str(exc)))
            continue
        outcome.archived.append(relative)
        moved.append(ArchivedPath(source=relative, archived=str(target.relative_to(layout.root))))
    if moved:
        manifest = read_manifest(layout)
        manifest.entries.append(
            ManifestEntry(
                run_id=run_id, codon_id=codon_id, loop_id=loop_id, time=utc_now_iso(), paths=moved
            )
        )
        _write_manifest(layout, manifest)
    return outcome


def _free(target: Path) -> Path:
    """``target``, or ``target.2``, ``target.3``... when an earlier archive holds it."""
    candidate, n = target, 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = target.with_name(f"{target.name}.{n}")
    return candidate


def archive_event(outcome: ArchiveOutcome) -> ArchiveCompletedEvent | ArchivePartialEvent:
    """``archive.completed`` when every path went, ``archive.partial`` otherwise."""
    if not outcome.failed:
        return ArchiveCompletedEvent(
            codon_id=outcome.codon_id,
            archived_paths=outcome.archived,
            archive_dir=outcome.archive_dir,
            loop_id=outcome.loop_id,
        )
    return ArchivePartialEvent(
        codon_id=outcome.codon_id,
        archived_paths=outcome.archived,
        failed_paths=outcome.failed,
        archive_dir=outcome.archive_dir,
        loop_id=outcome.loop_id,
    )


def restore_archives(
    layout: ExecutionLayout, undone: Collection[tuple[str, str]] | None
) -> list[RollbackArchiveRestoreEvent]:
    """Moves back what the (run id, codon id) pairs in ``undone`` (None: every
    codon) archived, newest first; one ``rollback.archiveRestore`` event per
    archive. A path that is in the workspace again is replaced (it is newer than
    the rollback's target). A path that could not be moved back stays recorded."""
    manifest = read_manifest(layout)
    if not manifest.entries:
        return []
    workspace = layout.workspace.resolve()
    kept: list[ManifestEntry] = []
    events: list[RollbackArchiveRestoreEvent] = []
    for entry in reversed(manifest.entries):
        if undone is not None and (entry.run_id, entry.codon_id) not in undone:
            kept.append(entry)
            continue
        restored: list[str] = []
        failed: list[ArchiveFailure] = []
        left: list[ArchivedPath] = []
        for item in entry.paths:
            source = layout.root / item.archived
            target = workspace / item.source
            try:
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif target.exists() or target.is_symlink():
                    target.unlink()
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(source, target)
            except OSError as exc:
                failed.append(ArchiveFailure(path=item.source, error=exc.strerror or str(exc)))
                left.append(item)
                continue
            restored.append(item.source)
        if left:
            kept.append(ManifestEntry(**{**msgspec.structs.asdict(entry), "paths": left}))
        status: Literal["completed", "partial", "failed"] = (
            "completed" if not failed else "partial" if restored else "failed"
        )
        events.append(
            RollbackArchiveRestoreEvent(
                codon_id=entry.codon_id,
                restored_paths=restored,
                status=status,
                failed_paths=failed or None,
            )
        )
    kept.reverse()
    _write_manifest(layout, Manifest(entries=kept))
    return events
