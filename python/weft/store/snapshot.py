"""state.json snapshots, written atomically.

The write order makes every crash point safe: the current snapshot first
becomes ``state.json.bak`` (a hard link to the same file, swapped in by a
rename: nothing is copied, so the backup costs the same for a 10 MB state as
for a small one; a copy where the file system has no hard links); the new one
is written to ``state.json.tmp`` and fsynced, renamed over ``state.json``,
and the directory is fsynced so the renames survive. A reader finds either
the old or the new snapshot, never a torn one, and the backup when
state.json is unusable.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from weft.filemodes import open_private, private_file

STATE = "state.json"
BACKUP = "state.json.bak"
TEMP = "state.json.tmp"
BACKUP_LINK = "state.json.bak.tmp"


def _write_synced(path: Path, data: bytes) -> None:
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep_backup(weft_dir: Path, state: Path) -> None:
    """Makes the current state.json the backup, atomically."""
    link = weft_dir / BACKUP_LINK
    try:
        link.unlink(missing_ok=True)
        os.link(state, link)
    except OSError:
        # No hard links here (or no room for a directory entry): copy.
        _write_synced(weft_dir / BACKUP, state.read_bytes())
        return
    os.replace(link, weft_dir / BACKUP)


def write_snapshot(
    weft_dir: Path,
    data: bytes | Callable[[Path], int],
    keep: Callable[[], bool] | None = None,
) -> int | None:
    """Replaces ``state.json`` with ``data`` atomically, keeping the previous as
    ``.bak``; returns its size. ``data`` may be a function that writes and
    fsyncs the file at the path it is given and returns its size (the core's
    ``write_snapshot_json``, which streams a large state). ``keep``, asked once
    the new file is written, may refuse it (None is returned, state.json stays)."""
    state = weft_dir / STATE
    if state.exists():
        _keep_backup(weft_dir, state)
    temp = weft_dir / TEMP
    if callable(data):
        # The core truncates an existing file and keeps its mode: made private here first.
        private_file(temp)
        size = data(temp)
    else:
        _write_synced(temp, data)
        size = len(data)
    if keep is not None and not keep():
        temp.unlink(missing_ok=True)
        return None
    os.replace(temp, state)
    _sync_dir(weft_dir)
    return size


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """A snapshot's bytes and which file they came from."""

    name: str
    data: bytes


def read_snapshots(weft_dir: Path) -> list[SnapshotFile]:
    """The snapshots present, best first: state.json, then its backup."""
    found = []
    for name in (STATE, BACKUP):
        path = weft_dir / name
        if path.exists():
            found.append(SnapshotFile(name, path.read_bytes()))
    return found
