"""The git index as a stat cache, driven through libgit2's C API (pygit2's cffi layer).

pygit2 does not expose what a fast checkpoint needs: a workdir diff limited to a
list of literal paths, and index entries carrying stat data. Both are here, so
the rest of the package never touches cffi.
"""

from __future__ import annotations

import os
from typing import Any, TypeAlias

import pygit2
from pygit2.enums import DiffOption
from pygit2.errors import check_error
from pygit2.ffi import C, ffi
from pygit2.utils import StrArray

from weft._core import FileStat
from weft.checkpoints.trees import MODE_EXEC, MODE_FILE, MODE_LINK, Entry

_BASE_FLAGS = int(
    DiffOption.INCLUDE_UNTRACKED
    | DiffOption.DISABLE_PATHSPEC_MATCH
    | DiffOption.UPDATE_INDEX
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
_ZERO_STAT = os.stat_result((0,) * 10)


StatData: TypeAlias = "os.stat_result | FileStat"
"""The stat fields the index keeps, from ``os.lstat`` or from :func:`weft._core.read_blob`."""


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
        # libgit2 saves the index file when a diff refreshes its stat data: only
        # the repository's owner may (beside a live run it is the run's file).
        self._refresh = 0 if owned else int(DiffOption.UPDATE_INDEX)

    def diff(self, paths: list[str] | None, *, recurse: bool) -> pygit2.Diff:
        """Index against workspace: for the literal ``paths`` (and what is under them), or all.

        Untracked files are included; ignored ones are not. Files whose stat
        data changed but whose content did not get their stat data refreshed.
        ``recurse`` lists untracked directories file by file (never for ``None``,
        where a whole untracked folder comes back as one ``dir/`` entry).
        """
        copts = ffi.new("git_diff_options *")
        check_error(C.git_diff_options_init(copts, 1))
        copts.flags = (_RECURSE_FLAGS if recurse else _BASE_FLAGS) & ~self._refresh
        cdiff = ffi.new("git_diff **")
        with StrArray(paths) as arr:
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

    def add(self, path: str, value: Entry, st: StatData) -> None:
        """Records ``path`` as ``value`` with the stat data it had when it was read."""
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
        try:
            st = os.lstat(os.path.join(self.root, path))
        except OSError:
            st = _ZERO_STAT  # no stat data: the next comparison hashes the file
        self.add(path, value, st)

    def remove(self, path: str) -> None:
        """Forgets ``path`` (no error if it is not there)."""
        err = C.git_index_remove(self.index._index, os.fsencode(path), 0)
        if err < 0 and err != _GIT_ENOTFOUND:
            check_error(err)

    def write(self) -> None:
        """Saves the index file."""
        self.index.write()
