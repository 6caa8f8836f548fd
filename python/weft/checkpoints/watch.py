"""Hints of which workspace paths changed, from Linux inotify (git's fsmonitor idea).

A checkpoint must find what changed among thousands of files. Without help that
means an ``lstat`` of every covered file, which on a 5,000-file workspace costs
about as much as everything else in a checkpoint together. The watcher keeps a
watch on every workspace directory and collects the names the kernel reports
as created, written, deleted, renamed or re-moded; the next checkpoint compares
only those paths against the index.

The hints are trusted only when they are complete. :meth:`ChangeWatcher.take`
returns ``None`` instead of a set whenever something could have been missed
(the kernel queue overflowed, the workspace itself moved, a watch could not be
added) and the caller then compares everything, exactly as without a watcher.
Events are always drained *before* the comparison that consumes them, so a
change made during a checkpoint is seen by the next one at the latest.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

_WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)
_EVENT = struct.Struct("iIII")
_READ = 1 << 16
"""Bytes asked for per read of the kernel's queue."""
_LARGEST_EVENT = _EVENT.size + 256
"""An event with the longest name (NAME_MAX, its NUL and padding)."""

#: More watched directories than this and the watcher gives up (full scans instead).
MAX_DIRECTORIES = 50_000
#: More dirty paths than this and a full comparison is cheaper than a path list.
MAX_DIRTY = 4_096


#: statfs(2) magic numbers of filesystems whose changes may come from another kernel
#: (NFS, SMB/CIFS, FUSE incl. virtiofs and Docker Desktop mounts, 9p, Ceph, AFS, Coda):
#: inotify never hears about those changes, so the watcher is not used there.
REMOTE_FILESYSTEMS = frozenset(
    {
        0x6969,  # NFS
        0x517B,  # SMB
        0xFF534D42,  # CIFS
        0xFE534D42,  # SMB2
        0x65735546,  # FUSE
        0x01021997,  # 9p
        0x00C36400,  # Ceph
        0x5346414F,  # AFS
        0x73757245,  # Coda
    }
)


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class _WatchLimitError(Exception):
    """A directory cannot be watched: too many, no inotify watches left, or
    the workspace root itself.

    Control flow inside this module only (the watcher falls back to scanning),
    never raised to a caller, so it is not a :class:`~weft.errors.WeftError`.
    """


def filesystem_type(path: Path) -> int | None:
    """The statfs(2) ``f_type`` of the filesystem holding ``path`` (Linux), or None."""
    if _LIBC is None:
        return None
    buf = ctypes.create_string_buffer(512)  # struct statfs is ~120 bytes; f_type comes first
    if _LIBC.statfs(os.fsencode(path), buf) != 0:
        return None
    return int(ctypes.c_ulong.from_buffer(buf).value) & 0xFFFFFFFF


class ChangeWatcher:
    """Collects the workspace paths that changed since the last :meth:`take`."""

    def __init__(self, libc: ctypes.CDLL, fd: int, root: Path, skip: Callable[[str], bool]):
        self._libc = libc
        self._fd = fd
        self._root = root
        self._skip = skip
        self._paths: dict[int, str] = {}  # watch descriptor -> workspace-relative dir
        self._dirty: set[str] = set()
        self._complete = False  # nothing trusted until the first full comparison
        self._broken = False
        self._lock = threading.Lock()

    @classmethod
    def start(cls, root: Path, *, skip: Callable[[str], bool]) -> ChangeWatcher | None:
        """Watches every directory under ``root`` except those ``skip`` names.

        Returns ``None`` where inotify is unavailable, the workspace is on a
        network or FUSE filesystem, or the tree is too big to watch.
        """
        if _LIBC is None or filesystem_type(root) in REMOTE_FILESYSTEMS:
            return None
        fd = _LIBC.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return None
        watcher = cls(_LIBC, fd, root, skip)
        try:
            watcher._watch_tree("")
        except _WatchLimitError:
            watcher.close()
            return None
        return watcher

    @property
    def usable(self) -> bool:
        """Whether the watcher still runs (false after it gave up for good)."""
        return not self._broken

    def take(self, *, drain: bool = True) -> set[str] | None:
        """The paths changed since the last call, or ``None`` if a full comparison is needed.

        Either way the slate is clean afterwards: the caller's comparison covers
        everything up to this moment (``drain=False``: up to the :meth:`peek`
        just made, for a caller that peeked under its own lock a moment ago).
        """
        with self._lock:
            if drain:
                self._drain_locked()
            if self._broken:
                return None
            if not self._complete or len(self._dirty) > MAX_DIRTY:
                self._dirty.clear()
                self._complete = True
                return None
            dirty, self._dirty = self._dirty, set()
            return dirty

    def peek(self, limit: int) -> list[str] | None:
        """The paths changed so far, left in place for :meth:`take`, if ``take``
        would return a set of at most ``limit``; ``None`` otherwise."""
        with self._lock:
            self._drain_locked()
            if self._broken or not self._complete or len(self._dirty) > limit:
                return None
            return list(self._dirty)

    def invalidate(self) -> None:
        """Makes the next :meth:`take` ask for a full comparison."""
        with self._lock:
            self._complete = False

    def drain(self) -> None:
        """Moves pending kernel events into the dirty set (keeps the kernel queue short)."""
        with self._lock:
            self._drain_locked()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self._fd >= 0:
                os.close(self._fd)

    def close(self) -> None:
        """Stops watching."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._broken = True

    def _drain_locked(self) -> None:
        if self._fd < 0:
            return
        while True:
            try:
                buf = os.read(self._fd, _READ)
            except BlockingIOError:
                return
            except OSError:
                self._give_up()
                return
            if not buf:
                return
            self._parse(buf)
            if len(buf) <= _READ - _LARGEST_EVENT:
                # Room was left for any event: the queue was empty (a read
                # that would only say so again is a system call saved).
                return

    def _parse(self, buf: bytes) -> None:
        offset = 0
        size = _EVENT.size
        while offset + size <= len(buf):
            wd, mask, _cookie, length = _EVENT.unpack_from(buf, offset)
            raw = buf[offset + size : offset + size + length].rstrip(b"\x00")
            offset += size + length
            self._handle(wd, mask, os.fsdecode(raw))

    def _handle(self, wd: int, mask: int, name: str) -> None:
        if mask & (IN_Q_OVERFLOW | IN_UNMOUNT):
            self._lost_events()
            return
        parent = self._paths.get(wd)
        if parent is None:
            return
        if mask & IN_IGNORED:
            del self._paths[wd]
            if parent == "":
                self._lost_events()
            return
        if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            if parent == "":
                self._lost_events()  # the workspace itself went away or moved
            return
        if not name:
            return
        rel = f"{parent}/{name}" if parent else name
        if self._skip(rel):
            return
        self._dirty.add(rel)
        if mask & IN_ISDIR:
            if mask & (IN_DELETE | IN_MOVED_FROM):
                self._forget(rel)
            if mask & (IN_CREATE | IN_MOVED_TO):
                try:
                    self._watch_tree(rel)
                except _WatchLimitError:
                    self._give_up()

    def _lost_events(self) -> None:
        # Directories created while events were lost have no watch yet: re-walk.
        self._complete = False
        try:
            self._watch_tree("")
        except _WatchLimitError:
            self._give_up()

    def _give_up(self) -> None:
        self._broken = True
        self._complete = False

    def _forget(self, rel: str) -> None:
        prefix = rel + "/"
        for wd, path in list(self._paths.items()):
            if path == rel or path.startswith(prefix):
                del self._paths[wd]
                with contextlib.suppress(OSError):
                    self._libc.inotify_rm_watch(self._fd, wd)

    def _watch_tree(self, rel: str) -> None:
        stack = [rel]
        while stack:
            current = stack.pop()
            if not self._add_watch(current):
                continue
            try:
                with os.scandir(self._root / current if current else self._root) as entries:
                    for entry in entries:
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                        except OSError:
                            continue
                        if not is_dir:
                            continue
                        child = f"{current}/{entry.name}" if current else entry.name
                        if not self._skip(child):
                            stack.append(child)
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue

    def _add_watch(self, rel: str) -> bool:
        if len(self._paths) >= MAX_DIRECTORIES:
            raise _WatchLimitError
        path = os.fsencode(self._root / rel if rel else self._root)
        wd = self._libc.inotify_add_watch(self._fd, path, _WATCH_MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOSPC, errno.ENOMEM):
                raise _WatchLimitError
            if rel == "":
                raise _WatchLimitError  # cannot watch the workspace root at all
            return False  # vanished or unreadable: its parent's events still cover it
        self._paths[wd] = rel
        return True
