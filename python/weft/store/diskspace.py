"""Storage failures (a full disk, a quota, a read-only or failing device),
recognised wherever they surface and said in one line.

A full disk can strike any write Weft makes: the journal, state.json, the
agent's raw log, a checkpoint object, a rig copy, the execution's metadata.
Each of those sites turns the failure into a
:class:`~weft.errors.StorageFullError` with :func:`storage_error`, so the run
ends at once (exit 1) with one line naming what could not be written and the
way forward, never a traceback and never a retry that cannot help. The
failure arrives in three shapes: an ``OSError`` with its errno, a
``sqlite3`` error whose text says so (SQLite reports ``SQLITE_FULL`` as
"database or disk is full"), and a pygit2 ``GitError`` carrying the OS text.
"""

from __future__ import annotations

import errno
import sqlite3

from weft.errors import StorageFullError

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})
"""The errnos that mean "this disk will not take the write", not "this path is wrong"."""

_STORAGE_TEXTS = (
    "no space left on device",
    "disk quota exceeded",
    "read-only file system",
    "input/output error",
    "database or disk is full",
    "disk i/o error",
    "file too large",
)
"""How the same failures read once a library (SQLite, libgit2) has turned them into text."""

RESUME_HINT = "free space (or fix the disk) and run the same command again to resume"


def is_storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a storage failure."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StorageFullError):
            return True
        if isinstance(current, OSError) and current.errno in STORAGE_ERRNOS:
            return True
        if isinstance(current, sqlite3.DatabaseError | OSError | RuntimeError) or (
            type(current).__name__ == "GitError"
        ):
            text = str(current).lower()
            if any(t in text for t in _STORAGE_TEXTS):
                return True
        current = current.__cause__ or current.__context__
    return False


def reason(exc: BaseException) -> str:
    """The system's short words for a storage failure ("No space left on device")."""
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        return exc.strerror or str(exc)
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def storage_error(what: str, exc: BaseException) -> StorageFullError:
    """The one-line error for ``exc`` while writing ``what`` (a path or a part of the store)."""
    if isinstance(exc, StorageFullError):
        return exc
    return StorageFullError(f"cannot write {what}: {reason(exc)}; {RESUME_HINT}", what=what)
