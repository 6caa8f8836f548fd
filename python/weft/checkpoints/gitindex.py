"""The git index as a stat cache, driven through libgit2's C API (pygit2's cffi layer).

pygit2 does not expose what a fast checkpoint needs: a workdir diff limited to a
list of literal paths, and index entries carrying stat data. Both are here, so
the rest of the package never touches cffi. The full comparison of the work
tree goes through a copy of the index's stat data in the core
(:class:`weft._core.StatCache`), kept in step by :meth:`StatIndex.add` and
:meth:`StatIndex.remove`: it walks the tree on threads, by folder descriptor,
where libgit2's diff stats each file by its full path on one thread.
"""

from __future__ import annotations

import os
import time
from typing import Any, TypeAlias

import pygit2
from pygit2.enums import DiffOption
from pygit2.errors import check_error
from pygit2.ffi import C, ffi
from pygit2.utils import StrArray

from weft._core import FileStat, StatCache
from weft.checkpoints.trees import MODE_EXEC, MODE_FILE, MODE_LINK, Entry

_BASE_FLAGS = int(
    DiffOption.INCLUDE_UNTRACKED
    | DiffOption.DISABLE_PATHSPEC_MATCH
    | DiffOption.INCLUDE_TYPECHANGE
    | DiffOption.SKIP_BINARY_CHECK
    | DiffOption.IGNORE_SUBMODULES
)
# With a path list, libgit2 reports an untracked file only when it recurses into
# untracked directories (a lone new file in a tracked folder is otherwise missed).
_RECURSE_FLAGS = _BASE_FLAGS | int(DiffOption.RECURSE_UNTRACKED_DIRS)
_GIT_ENOTFOUND = -3
_MODE_INT = {MODE_FILE: 0o100644, MODE_EXEC: 0o100755, MODE_LINK: 0o120000}
_MODE_BYTES = {v: k for k, v in _MODE_INT.items()}
# With the nanosecond fields (ten items leave st_mtime_ns and st_ctime_ns None).
_ZERO_STAT = os.stat_result((0,) * 16)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may run on
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: Threads the full comparison reads the work tree with (stat calls are CPU-bound in the kernel).
SCAN_THREADS = max(1, min(_cpus(), 4))


StatData: TypeAlias = "os.stat_result | FileStat"
"""The stat fields the index keeps, from ``os.lstat`` or from :func:`weft._core.read_blob`."""


class _FsPath:
    """A path that hands libgit2 its file-system bytes (``os.fsencode``)."""

    __slots__ = ("_raw",)

    def __init__(self, path: str) -> None:
        self._raw = os.fsencode(path)

    def __fspath__(self) -> bytes:
        return self._raw


def _i32(value: int) -> int:
    return ((value + (1 << 31)) % (1 << 32)) - (1 << 31)


class StatIndex:
    """A repository's index: which files a checkpoint holds, and how they looked on disk."""

    def __init__(
        self, repo: pygit2.Repository, index: pygit2.Index, root: str, *, owned: bool = True
    ) -> None:
        self.repo = repo
        self.index = index
        self.root = root
        # The index file's time when this index was read: an entry older than it
        # is trusted by its stat, as git does. Every save of the index by an owner
        # smudges the entries its stat cache could not vouch for (see write()),
        # and libgit2 is never let to save it (no UPDATE_INDEX in the diffs).
        try:
            self._stamp = os.stat(os.path.join(repo.path, "index")).st_mtime_ns
        except OSError:
            self._stamp = 0
        self._cache: StatCache | None = self._load_cache() if owned else None
        """The index's stat data in the core: the owner's from the start (every
        change and save of the index goes through it); a reader's at its first
        full comparison (it changes nothing)."""

    def scan(self, roots: list[str] | None) -> tuple[list[str], list[str], list[str], list[str]]:
        """Compares the work tree under ``roots`` (``None``: all) with the index.

        Returns ``(changed, gone, untracked, untracked_dirs)``: indexed paths
        whose kind, mode or stat differ (or whose content does, where the stat
        alone cannot vouch for it), indexed paths not found, files nothing
        indexes, and folders under which nothing is indexed (not entered).
        Ignore rules are not applied. Raises ``OSError`` naming the path that
        could not be read.
        """
        cache = self._cache
        if cache is None:
            cache = self._cache = self._load_cache()
        encoded = [b""] if roots is None else [os.fsencode(r) for r in roots]
        return cache.scan(self.root, encoded, SCAN_THREADS)

    def reset(self, tree: pygit2.Tree) -> None:
        """Makes the index ``tree``'s, with no stat data (the next full comparison
        hashes every file once)."""
        self.index.read_tree(tree)
        if self._cache is not None:
            self._cache = self._load_cache()

    def _load_cache(self) -> StatCache:
        index = self.index._index
        buffer = ffi.buffer
        entries = []
        for i in range(C.git_index_entrycount(index)):
            e = C.git_index_get_byindex(index, i)
            entries.append(
                (
                    ffi.string(e.path),
                    e.mode,
                    bytes(buffer(e.id.id, 20)),
                    e.ino,
                    e.file_size,
                    e.mtime.seconds,
                    e.mtime.nanoseconds,
                    e.ctime.seconds,
                    e.ctime.nanoseconds,
                )
            )
        cache = StatCache()
        cache.load(entries, self._stamp)
        return cache

    def diff(self, paths: list[str] | None, *, recurse: bool) -> pygit2.Diff:
        """Index against workspace: for the literal ``paths`` (and what is under them), or all.

        Untracked files are included; ignored ones are not. Nothing in the
        index changes (libgit2 may not save it: see ``__init__``). ``recurse``
        lists untracked directories file by file (never for ``None``, where a
        whole untracked folder comes back as one ``dir/`` entry).
        """
        copts = ffi.new("git_diff_options *")
        check_error(C.git_diff_options_init(copts, 1))
        copts.flags = _RECURSE_FLAGS if recurse else _BASE_FLAGS
        cdiff = ffi.new("git_diff **")
        # As bytes: pygit2 encodes a str strictly as UTF-8, and a name need not be
        # (StrArray takes any path-like object; its annotation says str only).
        raw: Any = None if paths is None else [_FsPath(p) for p in paths]
        with StrArray(raw) as arr:
            if paths is not None:
                arr.assign_to(copts.pathspec)
            check_error(
                C.git_diff_index_to_workdir(cdiff, self.repo._repo, self.index._index, copts)
            )
        diff: pygit2.Diff = pygit2.Diff.from_c(bytes(ffi.buffer(cdiff)[:]), self.repo)
        return diff

    def paths(self) -> list[str]:
        """Every path in the index."""
        index = self.index._index
        out = []
        for i in range(C.git_index_entrycount(index)):
            out.append(os.fsdecode(ffi.string(C.git_index_get_byindex(index, i).path)))
        return out

    def entry(self, path: str) -> Entry | None:
        """The checkpoint's entry for ``path`` (a file or a link), or None."""
        found = C.git_index_get_bypath(self.index._index, os.fsencode(path), 0)
        if found == ffi.NULL:
            return None
        mode = _MODE_BYTES.get(found.mode)
        return None if mode is None else (mode, bytes(ffi.buffer(found.id.id, 20)))

    def add(self, path: str, value: Entry, st: StatData, taken_ns: int | None = None) -> None:
        """Records ``path`` as ``value`` with the stat data it had when it was read.

        ``taken_ns`` is a wall-clock time at or before the moment of the stat (a
        :class:`FileStat` carries its own; without one, the next full
        comparison reads the file again before it trusts the stat).
        """
        self._set(path, value, st)
        if self._cache is not None:
            if taken_ns is None:
                taken_ns = st.taken_ns if isinstance(st, FileStat) else 0
            stat = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            self._cache.set(os.fsencode(path), _MODE_INT[value[0]], value[1], stat, taken_ns)

    def _set(self, path: str, value: Entry, st: StatData) -> None:
        entry: Any = ffi.new("git_index_entry *")
        # Truncated as libgit2 does (git's index keeps 32-bit fields).
        entry.ctime.seconds = _i32(st.st_ctime_ns // 1_000_000_000)
        entry.ctime.nanoseconds = st.st_ctime_ns % 1_000_000_000
        entry.mtime.seconds = _i32(st.st_mtime_ns // 1_000_000_000)
        entry.mtime.nanoseconds = st.st_mtime_ns % 1_000_000_000
        entry.dev = st.st_dev & 0xFFFFFFFF
        entry.ino = st.st_ino & 0xFFFFFFFF
        entry.mode = _MODE_INT[value[0]]
        entry.uid = st.st_uid & 0xFFFFFFFF
        entry.gid = st.st_gid & 0xFFFFFFFF
        entry.file_size = st.st_size & 0xFFFFFFFF
        ffi.memmove(entry.id.id, value[1], 20)
        cpath = ffi.new("char[]", os.fsencode(path))
        entry.path = cpath
        check_error(C.git_index_add(self.index._index, entry))

    def add_from_disk(self, path: str, value: Entry) -> None:
        """Records ``path`` as ``value`` with the stat data the file has now."""
        taken = time.time_ns()
        try:
            st = os.lstat(os.path.join(self.root, path))
        except OSError:
            st = _ZERO_STAT  # no stat data: the next comparison hashes the file
        self.add(path, value, st, taken)

    def remove(self, path: str) -> None:
        """Forgets ``path`` (no error if it is not there)."""
        err = C.git_index_remove(self.index._index, os.fsencode(path), 0)
        if err < 0 and err != _GIT_ENOTFOUND:
            check_error(err)
        if self._cache is not None:
            self._cache.remove(os.fsencode(path))

    def write(self) -> None:
        """Saves the index file.

        The entries whose stat the cache cannot vouch for yet are saved with
        size 0 (git's "smudge"), so a later opening, which trusts entries older
        than the index file, compares their content.
        """
        if self._cache is not None:
            index = self.index._index
            for path in self._cache.racy_paths():
                found = C.git_index_get_bypath(index, os.fsencode(path), 0)
                if found != ffi.NULL and found.file_size != 0:
                    entry: Any = ffi.new("git_index_entry *")
                    ffi.memmove(entry, found, ffi.sizeof("git_index_entry"))
                    cpath = ffi.new("char[]", os.fsencode(path))
                    entry.path = cpath
                    entry.file_size = 0
                    check_error(C.git_index_add(index, entry))
        self.index.write()
