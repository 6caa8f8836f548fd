"""The modes of the files and folders Weft keeps for an execution: private to the user.

An execution's ``.weft/`` holds the journal, state snapshots, the agents' raw
logs and the checkpoint repository: prompts, model output, costs and
whatever the agent read. Weft makes each of them itself with an explicit
mode: folders ``0700``, files ``0600`` (:data:`SHARED_ENV` set: ``0750`` and
``0640``, for a team sharing executions through a group). The mode is set
again after creation (``chmod``), so the process umask neither loosens nor
tightens it.

Why not a umask set at the CLI's entry: the agent's work tree (``agentRoot/``)
is the user's project, and the files the agent writes there, and the ones
Weft writes there for it (rig copies, checkpoint restores), keep the user's
usual modes. A process umask would leak into those (child processes inherit
it) or need undoing around every one of them.

SQLite creates ``weft.db-wal`` and ``weft.db-shm`` itself, with the mode of
the database file (its unix VFS copies it), so making ``weft.db`` private
first is enough: :func:`private_file`.

:func:`private_folder` makes (or tightens) a folder; :func:`open_private`
opens a file, creating it private; :func:`private_file` creates or tightens
a file created by someone else (SQLite, the core).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = [
    "SHARED_ENV",
    "file_mode",
    "folder_mode",
    "open_private",
    "private_file",
    "private_folder",
    "tighten",
]

SHARED_ENV = "WEFT_SHARED_GROUP"
"""Set to ``1`` (or ``true``, ``yes``): the execution's group may read
(folders ``0750``, files ``0640``); unset, only the user (``0700``, ``0600``)."""

_PRIVATE = (0o700, 0o600)
_SHARED = (0o750, 0o640)


def _modes() -> tuple[int, int]:
    # Read at each call, not at import: a test or an embedding program may set it late.
    value = os.environ.get(SHARED_ENV, "").strip().lower()
    return _SHARED if value in ("1", "true", "yes", "on") else _PRIVATE


def folder_mode() -> int:
    """The mode of a folder Weft keeps for an execution."""
    return _modes()[0]


def file_mode() -> int:
    """The mode of a file Weft keeps for an execution."""
    return _modes()[1]


def _chmod(path: str | os.PathLike[str] | int, mode: int) -> None:
    # Another user's file (a shared execution) cannot be changed, and need not be:
    # its owner's Weft set it. Anything else (a vanished file) is the caller's to see.
    with contextlib.suppress(PermissionError):
        os.chmod(path, mode)


def private_folder(path: str | os.PathLike[str]) -> Path:
    """Makes ``path`` a folder of mode :func:`folder_mode`, creating it if
    missing (its missing parents too, with the same mode: they are Weft's
    when it makes them), tightening it if it exists (an execution made by an
    older Weft). Returns it as a :class:`~pathlib.Path`."""
    folder = Path(path)
    mode = folder_mode()
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for made in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            os.mkdir(made, mode)
        _chmod_folder(made, mode)
    if not missing:
        _chmod_folder(folder, mode)
    return folder


def _chmod_folder(folder: Path, mode: int) -> None:
    # A setgid bit (inherited from a shared parent) is kept: it gives new files the group.
    current = stat.S_IMODE(os.stat(folder).st_mode)
    wanted = mode | (current & stat.S_ISGID)
    if current != wanted:
        _chmod(folder, wanted)


def open_private(path: str | os.PathLike[str], flags: int, *, dir_fd: int | None = None) -> int:
    """``os.open(path, flags)`` where a file it creates gets :func:`file_mode`
    whatever the umask; an existing file is tightened to it too."""
    mode = file_mode()
    fd = os.open(path, flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            _chmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_file(path: str | os.PathLike[str]) -> None:
    """Makes ``path`` a file of mode :func:`file_mode`: created empty if
    missing, so that whoever writes it next (SQLite, the core) finds its mode
    set; tightened if it exists."""
    os.close(open_private(path, os.O_WRONLY | os.O_CREAT))


def tighten(path: str | os.PathLike[str]) -> None:
    """Sets ``path`` to :func:`file_mode` if it exists (a file made by an older Weft)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_IMODE(os.stat(path).st_mode) != file_mode():
            _chmod(path, file_mode())
