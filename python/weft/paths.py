"""Paths built from ids and hank values stay where they belong.

Ids and hank values are checked when the hank loads (:mod:`weft.config.ids`,
:mod:`weft.config.rules`), but the runtime builds file paths from them in many
places, and a value can also come from an older journal, a state file or an
agent. :func:`inside` is the second line of defence, applied where such a path
is built: it resolves ``..`` and symbolic links and refuses a path that would
leave its root, with :class:`~weft.errors.UnsafePathError` (a one-line
message saying what, where and how to fix it) before anything is written.

A path checked once can still be changed before it is written to (an agent
replaces a folder by a link to somewhere else): :func:`folder_below` opens a
file's folder one name at a time without following any link, for writes
that happen long after the check (sentinel outputs, written at every call).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from weft.errors import UnsafePathError
from weft.terminal import printable

__all__ = ["component", "contains", "folder_below", "inside"]


def _real(path: str | os.PathLike[str]) -> str:
    # realpath resolves the links of the parts that exist and normalises the
    # rest lexically, so a path not created yet is judged as it would be.
    return os.path.realpath(path)


def contains(outer: str | os.PathLike[str], inner: str | os.PathLike[str]) -> bool:
    """Whether ``inner`` is ``outer`` or lies inside it, links and ``..`` resolved."""
    real_outer, real_inner = _real(outer), _real(inner)
    return real_inner == real_outer or real_inner.startswith(real_outer.rstrip(os.sep) + os.sep)


def _plainly_inside(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """True when ``root / path`` is inside ``root`` without resolving every link:
    ``path`` is relative, made of plain names, and none of them that exists
    under ``root`` is a link. Then resolving it gives ``realpath(root)``
    followed by those names, so it cannot leave; anything else (``..``, an
    absolute path, a link on the way) gets the full check. The runtime builds
    such paths at every codon, and the full check lstats every component of
    the absolute path (about 13 calls per codon).
    """
    rel = os.fspath(path)
    if not rel or rel.startswith(os.sep):
        return False
    if ".." in os.fspath(root).split(os.sep):
        # realpath collapses "missing/.." by name, the kernel refuses it: a name
        # under such a root may be judged missing here and be a link there.
        return False
    names = [n for n in rel.split(os.sep) if n and n != "."]
    if not names or ".." in names:
        return False
    current = os.fspath(root)
    for name in names:
        current = os.path.join(current, name)
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return True  # nothing below exists: judged by name, as realpath would
        except OSError:
            return False
    return True


def component(name: str, *, what: str) -> str:
    """``name`` if it is one plain path component (not empty, not ``.`` or
    ``..``, no ``/``, ``\\`` or NUL); raises :class:`~weft.errors.UnsafePathError`."""
    if name in ("", ".", "..") or any(ch in name for ch in ("/", "\\", "\x00")):
        raise UnsafePathError(
            f'{printable(what)} "{printable(name)}" is not a plain file name; rename the id '
            "or value it was built from (run `weft validate`)",
            path=name,
            root="",
        )
    return name


def inside(root: str | os.PathLike[str], path: str | os.PathLike[str], *, what: str) -> Path:
    """``root / path`` (``path`` may be absolute), if it stays inside ``root``.

    ``what`` names the path for the message (``"the agent log of codon x"``).
    Raises :class:`~weft.errors.UnsafePathError` when the path, once ``..``
    and symbolic links are resolved, lies outside ``root``, or when it holds a
    NUL character.
    """
    # One parse instead of two (``Path(root) / path``): the runtime calls this at every codon.
    candidate = Path(os.path.join(os.fspath(root), os.fspath(path)))
    text = os.fspath(candidate)
    if "\x00" in text:
        raise UnsafePathError(
            f"{printable(what)} ({printable(text)}) contains a NUL character; rename the id "
            "or value it was built from",
            path=text,
            root=os.fspath(root),
        )
    if not _plainly_inside(root, path) and not contains(root, candidate):
        raise UnsafePathError(
            f"{printable(what)} ({printable(text)}) would be outside {printable(os.fspath(root))}; "
            "ids and paths in a hank must stay inside the execution (run `weft validate`)",
            path=text,
            root=os.fspath(root),
        )
    return candidate


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def folder_below(
    root: str | os.PathLike[str], path: str | os.PathLike[str], *, what: str
) -> Iterator[tuple[int, str]]:
    """The folder of ``path`` (``root`` joined with it), opened below ``root``
    one name at a time, never through a symbolic link, and created where
    missing: yields ``(folder descriptor, file name)`` for ``os.open(...,
    dir_fd=...)`` with ``O_NOFOLLOW``.

    ``root`` itself is trusted (the execution made it; made here if missing). Raises
    :class:`~weft.errors.UnsafePathError` when ``path`` leaves ``root`` by
    name or a folder on the way is a link (or not a folder).
    """
    rel = os.path.relpath(os.path.normpath(os.path.join(root, path)), root)
    names = rel.split(os.sep)
    if rel in (".", "") or names[0] == ".." or os.path.isabs(rel):
        raise UnsafePathError(
            f"{printable(what)} ({printable(os.fspath(path))}) would be outside "
            f"{printable(os.fspath(root))}",
            path=os.fspath(path),
            root=os.fspath(root),
        )
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names[:-1]:
            try:
                step = _open_folder(name, fd, root, path, what)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made meanwhile: opened below
                    os.mkdir(name, dir_fd=fd)
                step = _open_folder(name, fd, root, path, what)
            os.close(fd)
            fd = step
        yield fd, names[-1]
    finally:
        os.close(fd)


def _open_folder(
    name: str,  # one name of the path, opened below the folder ``fd``
    fd: int,
    root: str | os.PathLike[str],
    path: str | os.PathLike[str],
    what: str,
) -> int:
    try:
        return os.open(name, _FOLDER_FLAGS, dir_fd=fd)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise UnsafePathError(
            f"{printable(what)} ({printable(os.fspath(path))}) goes through {printable(name)}, "
            f"which is a link or not a folder: nothing is written outside "
            f"{printable(os.fspath(root))} (remove the link)",
            path=os.fspath(path),
            root=os.fspath(root),
        ) from None
