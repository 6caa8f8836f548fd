"""Editing git trees in memory: a new root tree from a base tree and a few path changes.

Only the trees on the paths of changed files are rebuilt (a change in
``a/b/c.txt`` rewrites ``a/b``, ``a`` and the root); every other subtree keeps
its object. The new objects are returned to the caller, which writes them all
at once (see :mod:`weft.checkpoints.packs`). Parsed trees are cached by SHA, so
the directories an agent keeps working in are parsed once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping

import pygit2

from weft.checkpoints.errors import CheckpointStorageError
from weft.checkpoints.packs import OBJ_TREE, object_id

MODE_TREE = b"40000"
MODE_FILE = b"100644"
MODE_EXEC = b"100755"
MODE_LINK = b"120000"
EMPTY_TREE = object_id(OBJ_TREE, b"")

#: An entry: ``(mode, binary sha)``. A change maps a path to an entry, or to None (delete).
Entry = tuple[bytes, bytes]

_TREE_ENTRY = re.compile(rb"(\d{5,6}) ([^\x00]+)\x00(.{20})", re.DOTALL)
_CACHE_LIMIT = 2_048
"""Parsed trees kept (then the cache starts over): a run makes new trees at
every checkpoint, so a larger cache only grows a long run's memory."""


class TreeError(CheckpointStorageError):
    """A tree object could not be read or parsed (the repository is damaged)."""


def _sort_key(item: tuple[bytes, Entry]) -> bytes:
    name, (mode, _sha) = item
    # git orders a subtree as if its name ended with "/".
    return name + b"/" if mode == MODE_TREE else name


def serialize(entries: Mapping[bytes, Entry]) -> bytes:
    """A tree object's body for ``entries`` (name -> (mode, sha)), in git's order."""
    return b"".join(
        mode + b" " + name + b"\x00" + sha
        for name, (mode, sha) in sorted(entries.items(), key=_sort_key)
    )


class TreeEditor:
    """Builds new trees over an object database, caching parsed trees by SHA."""

    def __init__(
        self,
        repo: pygit2.Repository,
        pending: Mapping[bytes, tuple[int, bytes]] | None = None,
    ) -> None:
        self._repo = repo
        self._cache: dict[bytes, dict[bytes, Entry]] = {}
        # Objects of the checkpoint log not yet in git (see weft.checkpoints.pending).
        self._pending: Mapping[bytes, tuple[int, bytes]] = {} if pending is None else pending

    def read(self, sha: bytes) -> dict[bytes, Entry]:
        """The entries of tree ``sha`` (a fresh dict the caller may change)."""
        if sha == EMPTY_TREE:
            return {}
        cached = self._cache.get(sha)
        if cached is not None:
            return dict(cached)
        logged = self._pending.get(sha)
        if logged is not None:
            kind, data = logged
        else:
            try:
                kind, data = self._repo.odb.read(pygit2.Oid(raw=sha))
            except (KeyError, pygit2.GitError) as exc:
                raise TreeError(
                    f"tree {sha.hex()} is missing from the checkpoint repository"
                ) from exc
        if kind != pygit2.enums.ObjectType.TREE:
            raise TreeError(f"object {sha.hex()} is not a tree")
        entries: dict[bytes, Entry] = {}
        consumed = 0
        for match in _TREE_ENTRY.finditer(data):
            if match.start() != consumed:
                raise TreeError(f"tree {sha.hex()} is malformed at byte {consumed}")
            mode, name, entry_sha = match.groups()
            entries[name] = (MODE_TREE if mode == b"040000" else mode, entry_sha)
            consumed = match.end()
        if consumed != len(data):
            raise TreeError(f"tree {sha.hex()} is malformed at byte {consumed}")
        self._remember(sha, entries)
        return dict(entries)

    def _remember(self, sha: bytes, entries: dict[bytes, Entry]) -> None:
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[sha] = entries

    def apply(
        self, base: bytes, changes: Mapping[str, Entry | None]
    ) -> tuple[bytes, list[tuple[int, bytes, bytes]]]:
        """The root tree after ``changes`` (path -> entry or None), and the new tree objects."""
        grouped: dict[bytes, Entry | None] = {os.fsencode(p): v for p, v in changes.items()}
        new_objects: list[tuple[int, bytes, bytes]] = []
        root = self._build(base, grouped, new_objects)
        if root is None:
            root = EMPTY_TREE
            new_objects.append((OBJ_TREE, EMPTY_TREE, b""))
        return root, new_objects

    def _build(
        self,
        sha: bytes | None,
        changes: dict[bytes, Entry | None],
        out: list[tuple[int, bytes, bytes]],
    ) -> bytes | None:
        entries = self.read(sha) if sha is not None else {}
        below: dict[bytes, dict[bytes, Entry | None]] = {}
        for path, value in changes.items():
            head, sep, rest = path.partition(b"/")
            if sep:
                below.setdefault(head, {})[rest] = value
            elif value is None:
                entries.pop(head, None)
            else:
                entries[head] = value
        for head, sub in below.items():
            current = entries.get(head)
            subtree = current[1] if current is not None and current[0] == MODE_TREE else None
            if current is not None and subtree is None and head in changes:
                # The name is now a file; changes below it are about the old directory.
                continue
            new = self._build(subtree, sub, out)
            if new is None:
                if subtree is not None:
                    entries.pop(head, None)
            else:
                entries[head] = (MODE_TREE, new)
        if not entries:
            return None
        body = serialize(entries)
        new_sha = object_id(OBJ_TREE, body)
        if new_sha != sha:
            out.append((OBJ_TREE, new_sha, body))
            self._remember(new_sha, entries)
        return new_sha

    def walk(self, sha: bytes, prefix: str = "") -> Iterator[tuple[str, Entry]]:
        """Every non-tree entry under tree ``sha`` as ``(path, (mode, sha))``."""
        for name, entry in self.read(sha).items():
            path = prefix + os.fsdecode(name)
            if entry[0] == MODE_TREE:
                yield from self.walk(entry[1], path + "/")
            else:
                yield path, entry
