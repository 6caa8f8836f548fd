"""Finding what changed in the workspace since the last checkpoint, for the covered files.

The index (the last checkpoint, with each file's stat data) is compared with
the workspace: every covered path by a walk in the core, or only the paths the
change watcher reported, by libgit2. Changed and new covered files are read
and hashed here; unchanged ones never are. Untracked folders are entered only
when a pattern can reach inside them, and ignored files stay out, as with
``git add``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import pygit2
from pygit2.enums import DeltaStatus

from weft._core import FileStat, read_blob
from weft.checkpoints.errors import CheckpointError
from weft.checkpoints.gitindex import StatData, StatIndex
from weft.checkpoints.packs import OBJ_BLOB
from weft.checkpoints.patterns import PatternSet, is_excluded
from weft.checkpoints.trees import MODE_EXEC, MODE_FILE, MODE_LINK, Entry

BlobRead = tuple[str, FileStat | None, bytes | None, bytes | None]
"""What :func:`weft._core.read_blob` returns: kind, stat, content, blob id."""

#: Up to this many new covered files are checked against the ignore rules one
#: by one; more go through one libgit2 diff.
_IGNORE_ONE_BY_ONE = 64

#: Files larger than this are hashed and stored by libgit2 as loose objects, not read here.
LARGE_FILE = 32 * 1024 * 1024


@dataclass
class Scan:
    """Changes against the index: path -> new entry, or None for a file that is gone."""

    changes: dict[str, Entry | None] = field(default_factory=dict)
    #: The new blobs to store, as ``(kind, sha, data)`` (when content is kept).
    blobs: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    #: The stat data of each changed file, taken before it was read.
    stats: dict[str, StatData] = field(default_factory=dict)


class WorkspaceScanner:
    """Fills a :class:`Scan` for one pattern set."""

    def __init__(
        self, index: StatIndex, pset: PatternSet, scan: Scan, *, keep_content: bool
    ) -> None:
        self._index = index
        self._repo = index.repo
        self._root = index.root
        self._pset = pset
        self._scan = scan
        self._keep = keep_content

    def compare_all(self) -> None:
        """Compares every path a pattern can cover.

        The walk (in the core, see :meth:`StatIndex.scan`) answers which
        indexed files may have changed and what is new; the ignore rules and
        the patterns are applied here. A new folder is entered only if a
        pattern can reach inside it and it is not ignored.
        """
        pset = self._pset
        roots = pset.scan_roots()
        if roots == []:
            return
        try:
            changed, gone, untracked, new_dirs = self._index.scan(roots)
        except OSError as exc:
            raise self._unreadable(exc) from exc
        changes = self._scan.changes
        for path in gone:
            changes[path] = None
        for path in changed:
            if not pset.matches(path):
                changes[path] = None  # held under patterns no longer in force
            elif not self._compare_tracked(path):
                self._stage(path)  # now a folder or a kind git cannot hold
        covered = [p for p in untracked if pset.matches(p)]
        if len(covered) > _IGNORE_ONE_BY_ONE:
            # Many new files (build output beside the sources, say): one libgit2
            # pass applies the ignore rules to all of them.
            self._collect(self._index.diff(covered, recurse=True))
        else:
            for path in covered:
                if not self._ignored(path):
                    self._stage(path)
        for directory in new_dirs:
            # (libgit2's diff of the folder leaves ignored files out on its own.)
            if pset.could_cover_under(directory) and not self._ignored(directory):
                self._collect_untracked_dir(directory)

    def _ignored(self, path: str) -> bool:
        """Whether the untracked ``path`` is ignored by the repository's rules."""
        try:
            return bool(self._repo.path_is_ignored(path))
        except UnicodeEncodeError:
            # pygit2 takes only UTF-8 names here; a diff of that one path leaves
            # it out when it is ignored (it lists a folder's files only when recursing).
            return len(self._index.diff([path], recurse=True)) == 0

    def _unreadable(self, exc: OSError) -> CheckpointError:
        """The error for a folder or file the walk could not read (``exc.filename``)."""
        reason = exc.strerror or str(exc)
        where = os.fsdecode(exc.filename or self._root)
        if os.path.isabs(where):
            return CheckpointError(
                f"cannot read the workspace {where} for the checkpoint: {reason}. "
                "Check that it exists and is readable."
            )
        pattern = f"!{where}/**" if os.path.isdir(os.path.join(self._root, where)) else f"!{where}"
        return CheckpointError(
            f"cannot read {where} for the checkpoint: {reason}. Make it readable, or "
            f"exclude it from checkpointedFiles with '{pattern}'."
        )

    def compare_paths(self, paths: Iterable[str]) -> None:
        """Compares only ``paths`` (and what is under them).

        Every indexed path is covered, so a path no pattern can cover changed nothing.
        """
        pset = self._pset
        relevant = sorted(p for p in paths if pset.matches(p) or pset.could_cover_under(p))
        # A file the checkpoint already holds is compared here (a libgit2 diff
        # costs ~0.2 ms even for one path, mostly its set-up); new files,
        # folders and type changes go to libgit2, which knows the ignore rules.
        rest = [p for p in relevant if not self._compare_tracked(p)]
        if rest:
            self._collect(self._index.diff(rest, recurse=True))

    def _compare_tracked(self, path: str) -> bool:
        """Compares ``path`` if the index holds it as a file or link and it is
        one still (or gone); False when libgit2 must."""
        held = self._index.entry(path)
        if held is None or not self._pset.matches(path):
            return False
        found = self._read(path)
        if found[0] in ("dir", "other"):
            return False
        scan = self._scan
        blobs = len(scan.blobs)
        self._stage(path, found)
        if scan.changes.get(path) == held:
            # Same content (the watcher saw a write of the same bytes, or a
            # touch): no change, but the index learns the new stat data, so it
            # is not hashed again.
            del scan.changes[path]
            new_stat = scan.stats.pop(path)
            del scan.blobs[blobs:]
            self._index.add(path, held, new_stat)
        return True

    def _collect(self, diff: pygit2.Diff) -> None:
        pset = self._pset
        for delta in diff.deltas:
            status = delta.status
            if status == DeltaStatus.DELETED:
                self._scan.changes[delta.old_file.path] = None
            elif status == DeltaStatus.UNTRACKED:
                path = delta.new_file.path
                if path.endswith("/"):
                    if pset.could_cover_under(path[:-1]):
                        self._collect_untracked_dir(path[:-1])
                elif pset.matches(path):
                    self._stage(path)
            elif status in (DeltaStatus.MODIFIED, DeltaStatus.TYPECHANGE):
                path = delta.new_file.path
                if pset.matches(path):
                    self._stage(path)
                else:
                    self._scan.changes[path] = None

    def _collect_untracked_dir(self, directory: str) -> None:
        for delta in self._index.diff([directory], recurse=True).deltas:
            if delta.status != DeltaStatus.UNTRACKED:
                continue
            path = delta.new_file.path
            if path.endswith("/"):
                # libgit2 does not descend into nested repositories; their files still count.
                self._walk(path[:-1])
            elif self._pset.matches(path):
                self._stage(path)

    def _walk(self, directory: str) -> None:
        stack = [directory]
        while stack:
            current = stack.pop()
            try:
                entries = list(os.scandir(os.path.join(self._root, current)))
            except OSError:
                continue
            for entry in entries:
                rel = f"{current}/{entry.name}"
                if entry.name == ".git" or is_excluded(rel):
                    continue
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    if self._pset.could_cover_under(rel) and not self._ignored(rel):
                        stack.append(rel)
                elif self._pset.matches(rel) and not self._ignored(rel):
                    self._stage(rel)

    def _read(self, path: str) -> BlobRead:
        try:
            # One call, detached from the interpreter (see weft._core.read_blob);
            # the stat comes first, so a write after it shows at the next checkpoint.
            # No link below the workspace is followed: a folder swapped for a
            # link to elsewhere (after the watcher or the walk saw it) is not
            # read through; the file then counts as gone.
            return read_blob(path, LARGE_FILE, root=self._root)
        except OSError as exc:
            raise CheckpointError(
                f"cannot read {path} for the checkpoint: {exc.strerror or exc}. Make it "
                f"readable, or exclude it from checkpointedFiles with '!{path}'."
            ) from exc

    def _stage(self, path: str, found: BlobRead | None = None) -> None:
        scan = self._scan
        kind, st, data, sha = self._read(path) if found is None else found
        if st is None or kind in ("missing", "dir", "other"):
            # Gone, or a kind git cannot hold (sockets, fifos, devices; a folder's
            # files are found on their own).
            scan.changes[path] = None
            return
        executable = MODE_EXEC if st.st_mode & 0o100 else MODE_FILE
        mode = MODE_LINK if kind == "link" else executable
        if sha is None:
            # Larger than LARGE_FILE: libgit2 stores it without holding it in memory.
            sha = self._repo.create_blob_fromdisk(os.path.join(self._root, path)).raw
        elif self._keep and data is not None:
            scan.blobs.append((OBJ_BLOB, sha, data))
        scan.changes[path] = (mode, sha)
        scan.stats[path] = st
