"""A rig ``copy`` operation: from the hank folder into the workspace, safely.

:func:`run_copy` (blocking; the rig runs it in a worker thread) checks both
paths before anything is written and raises :class:`CopyError` with a message
for the user:

* ``from`` is relative to the hank folder and stays inside it: no absolute
  path, no ``..``, no symlink on the way, not the folder itself, nothing
  inside ``.git``/``.weft``;
* ``to`` is relative to the workspace and stays inside it: no absolute path,
  no ``..``, no ``.git``/``.weft`` component, not into
  ``read_only_data_source``, no symlink on the way (an existing symlink at a
  file's own target is replaced, never written through);
* a target inside its source, or a source inside its target, is refused.

A file is copied to exactly ``to``; a folder is merged into ``to``, skipping
``.git``, ``.weft``, ``.weft.backup-*`` and what the ignore rules
(:mod:`weft.runtime.rig.ignore`) name. Modes and times are preserved; a
symlink is recreated only when it stays inside the copied folder. A full disk
raises :class:`~weft.errors.StorageFullError` (it ends the run); a set
``cancel`` event stops the walk at the next entry (:class:`CopyCancelledError`).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from weft.config.schema import CopyOp
from weft.errors import UnsafePathError, WeftError
from weft.paths import contains, inside
from weft.runtime.rig.ignore import IgnoreRules, is_ignored, root_rules
from weft.store.diskspace import STORAGE_ERRNOS, storage_error
from weft.terminal import printable

__all__ = [
    "ALWAYS_EXCLUDED",
    "DATA_LINK",
    "CopyCancelledError",
    "CopyError",
    "CopyStats",
    "run_copy",
]

ALWAYS_EXCLUDED = frozenset({".git", ".weft"})
"""Names never copied (nor allowed in ``from`` or ``to``)."""
DATA_LINK = "read_only_data_source"
"""The workspace's link to the read-only data: never a copy target."""


class CopyError(WeftError):
    """A copy failed; the message is for the user."""


class CopyCancelledError(WeftError):
    """The rig was cancelled while a copy thread was running."""


@dataclass(slots=True)
class CopyStats:
    """What a copy did: files and bytes written, entries the ignore rules skipped."""

    files: int = 0
    bytes: int = 0
    ignored: list[str] | None = None


def _always_excluded(name: str) -> bool:
    return name in ALWAYS_EXCLUDED or name.startswith(".weft.backup-")


def _clean_parts(raw: str, field: str) -> list[str]:
    if raw.startswith("/"):
        raise CopyError(f'"{field}" must be a relative path, got "{raw}"')
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise CopyError(f'"{field}" may not contain "..", got "{raw}"')
    for part in parts:
        if _always_excluded(part):
            raise CopyError(f'"{field}" may not name or enter "{part}", got "{raw}"')
    return parts


def _resolve_source(hank_dir: Path, raw: str) -> tuple[Path, str, os.stat_result]:
    parts = _clean_parts(raw, "from")
    if not parts:
        raise CopyError(
            f'"from" names the hank folder itself ("{raw}"); name a file or folder inside it'
        )
    path = hank_dir
    for i, part in enumerate(parts):
        path = path / part
        try:
            st = path.lstat()
        except FileNotFoundError:
            raise CopyError(
                f'source "{raw}" does not exist in the hank folder {hank_dir}'
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise CopyError(
                f'source "{raw}": {"/".join(parts[: i + 1])} is a symbolic link; rig copies do '
                "not follow links (copy the real file or folder)"
            )
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            raise CopyError(f'source "{raw}": {"/".join(parts[: i + 1])} is not a folder')
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise CopyError(f'source "{raw}" is not a regular file or folder')
    return path, "/".join(parts), st


def _resolve_target(workspace: Path, raw: str, *, source_is_dir: bool) -> Path:
    parts = _clean_parts(raw, "to")
    if parts and parts[0] == DATA_LINK:
        raise CopyError(f'"to" may not write into the read-only data ("{raw}")')
    if not parts and not source_is_dir:
        raise CopyError(f'"to" must name the target file, got "{raw}"')
    path = workspace
    for i, part in enumerate(parts):
        path = path / part
        last = i == len(parts) - 1
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) and not (last and not source_is_dir):
            raise CopyError(
                f'target "{raw}": {"/".join(parts[: i + 1])} is a symbolic link; rig copies '
                "never write through links"
            )
        if not last and not stat.S_ISDIR(st.st_mode):
            raise CopyError(f'target "{raw}": {"/".join(parts[: i + 1])} is not a folder')
    return path


def _check_bounds(source: Path, target: Path, workspace: Path, op: CopyOp) -> None:
    """Refuses a copy that would never end or would eat its own source.

    A destination inside the source (the execution lives in the copied
    folder) makes the walk meet its own output and copy it again, level after
    level; a source inside the destination is overwritten by itself. Both are
    refused before anything is written. Validation refuses the cases it can
    see (:mod:`weft.config.copies`); the execution folder is only certain here.
    """
    # A link at the target's own name is replaced, never followed: judge where
    # the copy lands, the real parent folder plus the name.
    target = Path(os.path.realpath(target.parent)) / target.name
    try:
        inside(workspace, target.parent, what=f'rig copy target "{op.copy.to}"')
    except UnsafePathError as e:
        raise CopyError(str(e)) from None
    if contains(source, target):
        raise CopyError(
            f'rig copy "{printable(op.copy.from_)}" -> "{printable(op.copy.to)}": the target '
            f"{printable(str(target))} lies inside the source {printable(str(source))}, so "
            "the copy would copy itself without end; move the execution out of the copied "
            "folder (weft run --execution DIR) or copy a folder that does not hold it"
        )
    if contains(target, source):
        raise CopyError(
            f'rig copy "{printable(op.copy.from_)}" -> "{printable(op.copy.to)}": the source '
            f"{printable(str(source))} lies inside the target {printable(str(target))}, so "
            "the copy would overwrite its own source; copy to a folder beside it"
        )


def _make_dirs(workspace: Path, target: Path) -> None:
    """Creates ``target``'s missing ancestors below ``workspace`` (already checked)."""
    path = workspace
    for part in target.relative_to(workspace).parts[:-1]:
        path = path / part
        if not path.exists():
            path.mkdir()


def _copy_file(src: Path, dst: Path, st: os.stat_result, stats: CopyStats) -> None:
    with contextlib.suppress(FileNotFoundError):
        dst_st = dst.lstat()
        if stat.S_ISDIR(dst_st.st_mode):
            raise CopyError(f"cannot copy the file {src.name}: {dst} is a folder")
        # Replacing (not overwriting) never writes through a symlink and works
        # on a read-only file left by an earlier copy.
        dst.unlink()
    shutil.copy2(src, dst, follow_symlinks=False)
    stats.files += 1
    stats.bytes += st.st_size


def _copy_link(src: Path, dst: Path, root: Path, rel: str) -> None:
    target = os.readlink(src)
    inside = root.resolve()
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    real = Path(os.path.realpath(src))
    if (
        os.path.isabs(target)
        or lexical == ".."
        or lexical.startswith("../")
        or not real.is_relative_to(inside)
    ):
        raise CopyError(
            f"{src} is a symbolic link to {target}, outside the copied folder; rig copies "
            "only keep links that stay inside it"
        )
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(dst.lstat().st_mode):
            raise CopyError(f"cannot copy the link {src.name}: {dst} is a folder")
        dst.unlink()
    os.symlink(target, dst)


def _copy_dir(
    src: Path,
    dst: Path,
    *,
    hank_rel: str,
    root: Path,
    rules: tuple[IgnoreRules, ...],
    stats: CopyStats,
    cancel: threading.Event,
) -> None:
    try:
        dst_st = dst.lstat()
    except FileNotFoundError:
        dst.mkdir()
    else:
        if stat.S_ISLNK(dst_st.st_mode):
            raise CopyError(f"{dst} is a symbolic link; rig copies never write through links")
        if not stat.S_ISDIR(dst_st.st_mode):
            raise CopyError(f"cannot copy the folder {src.name}: {dst} exists and is not a folder")
    nested = src / ".gitignore"
    if nested.is_file() and not nested.is_symlink():
        rules = (*rules, IgnoreRules(nested.read_text(errors="replace").splitlines(), hank_rel))
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    assert stats.ignored is not None
    for entry in entries:
        if cancel.is_set():
            raise CopyCancelledError
        rel = f"{hank_rel}/{entry.name}"
        st = entry.stat(follow_symlinks=False)
        is_dir = stat.S_ISDIR(st.st_mode)
        if _always_excluded(entry.name) or is_ignored(rules, rel, is_dir):
            stats.ignored.append(rel + ("/" if is_dir else ""))
            continue
        src_child, dst_child = Path(entry.path), dst / entry.name
        if stat.S_ISLNK(st.st_mode):
            _copy_link(src_child, dst_child, root, str(src_child.relative_to(root)))
        elif is_dir:
            _copy_dir(
                src_child,
                dst_child,
                hank_rel=rel,
                root=root,
                rules=rules,
                stats=stats,
                cancel=cancel,
            )
        elif stat.S_ISREG(st.st_mode):
            _copy_file(src_child, dst_child, st, stats)
        else:
            raise CopyError(
                f"{src_child} is not a regular file, folder or link; it cannot be copied"
            )
    # After the contents, so that a read-only source folder can still be filled.
    shutil.copystat(src, dst, follow_symlinks=False)


def run_copy(
    op: CopyOp, hank_dir: Path, workspace: Path, cancel: threading.Event
) -> tuple[Path, bool, CopyStats]:
    """Runs one copy operation (blocking): the target, whether a folder was copied, and
    what was copied. Raises :class:`CopyError`."""
    try:
        source, hank_rel, st = _resolve_source(hank_dir, op.copy.from_)
        is_dir = stat.S_ISDIR(st.st_mode)
        target = _resolve_target(workspace, op.copy.to, source_is_dir=is_dir)
        _check_bounds(source, target, workspace, op)
        stats = CopyStats(ignored=[])
        _make_dirs(workspace, target)
        if is_dir:
            _copy_dir(
                source,
                target,
                hank_rel=hank_rel,
                root=source,
                rules=(root_rules(hank_dir),),
                stats=stats,
                cancel=cancel,
            )
        else:
            _copy_file(source, target, st, stats)
    except OSError as e:
        where = e.filename or op.copy.to
        if e.errno in STORAGE_ERRNOS:
            # Not a rig failure to retry or ignore: the disk takes no more.
            raise storage_error(f"the rig copy to {where}", e) from e
        raise CopyError(f"copy failed: {e.strerror or e}: {where}") from None
    return target, is_dir, stats
