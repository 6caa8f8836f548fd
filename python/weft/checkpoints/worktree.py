"""Writing a checkpoint's files into the workspace, and removing the ones it lacks.

Each file is written under a temporary name (in the runtime's excluded
namespace, so a crash never leaves a stray file that a later checkpoint would
pick up) and renamed into place. Whatever stands in the way of the checkpoint's
layout (a file where it has a folder, a folder where it has a file) goes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterable

from weft.checkpoints.errors import CheckpointError


def remove_files(root: str, paths: Iterable[str]) -> None:
    """Deletes ``paths`` (relative to ``root``), then the folders that left empty."""
    parents: set[str] = set()
    for path in paths:
        full = os.path.join(root, path)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise CheckpointError(
                f"restore could not remove {path}: {exc.strerror or exc}; "
                "check its permissions and retry"
            ) from exc
        head = path.rpartition("/")[0]
        while head:
            parents.add(head)
            head = head.rpartition("/")[0]
    # Deepest first, so emptied parents go too; a folder with other content stays.
    for directory in sorted(parents, key=lambda d: d.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(root, directory))


def write_file(
    root: str, path: str, data: bytes, *, executable: bool, link: bool
) -> tuple[os.stat_result, int]:
    """Writes ``path`` (relative to ``root``) with ``data``; a link's data is its target.

    Returns the stat of what was written, taken before it was renamed into place
    (a later write shows as a change), and the wall-clock time just before it.
    """
    full = os.path.join(root, path)
    _make_parents(root, path)
    if os.path.isdir(full) and not os.path.islink(full):
        shutil.rmtree(full)
    tmp = os.path.join(
        os.path.dirname(full), f".weftcheckpoints.restore-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    )
    try:
        if link:
            os.symlink(os.fsdecode(data), tmp)
            taken = time.time_ns()
            written = os.lstat(tmp)
        else:
            # The umask applies, as it does for git checkouts.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o777 if executable else 0o666)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                taken = time.time_ns()
                written = os.fstat(fd)
            finally:
                os.close(fd)
        os.replace(tmp, full)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CheckpointError(
            f"restore could not write {path}: {exc.strerror or exc}; "
            "check the workspace's permissions and free space, then retry"
        ) from exc
    return written, taken


def _make_parents(root: str, path: str) -> None:
    current = root
    for part in path.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current)
            continue
        if not stat.S_ISDIR(st.st_mode):
            # A file (or link) stands where the checkpoint has a folder.
            os.unlink(current)
            os.mkdir(current)
