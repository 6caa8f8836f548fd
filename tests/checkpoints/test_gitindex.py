"""The index as a stat cache: libgit2 compares what changed and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
from tests.checkpoints.helpers import write

from weft.checkpoints.gitindex import StatIndex
from weft.checkpoints.trees import MODE_FILE


def _index(tmp_path: Path) -> StatIndex:
    repo = pygit2.init_repository(str(tmp_path / "g.git"), bare=True)
    (tmp_path / "ws").mkdir()
    repo.workdir = str(tmp_path / "ws")
    return StatIndex(repo, repo.index, str(tmp_path / "ws"))


def _changes(index: StatIndex, paths: list[str] | None) -> list[tuple[str, str]]:
    return [(d.status_char(), d.new_file.path) for d in index.diff(paths, recurse=True).deltas]


def test_recorded_files_compare_clean_until_they_change(tmp_path: Path) -> None:
    index = _index(tmp_path)
    path = write(tmp_path / "ws", "notes/a.md", "same size")
    index.add("notes/a.md", (MODE_FILE, pygit2.hash(b"same size").raw), os.lstat(path))
    assert _changes(index, None) == []
    before = path.stat()
    path.write_text("SAME SIZE")  # same size, and the old mtime put back: ctime still moves
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert _changes(index, ["notes/a.md"]) == [("M", "notes/a.md")]


def test_a_path_list_finds_new_files_next_to_recorded_ones(tmp_path: Path) -> None:
    index = _index(tmp_path)
    path = write(tmp_path / "ws", "notes/a.md", "a")
    index.add("notes/a.md", (MODE_FILE, pygit2.hash(b"a").raw), os.lstat(path))
    write(tmp_path / "ws", "notes/b.md", "b")
    write(tmp_path / "ws", "other/c.md", "c")
    assert _changes(index, ["notes/b.md"]) == [("?", "notes/b.md")]
    assert _changes(index, ["other"]) == [("?", "other/c.md")]
    index.remove("notes/a.md")
    index.remove("never/there")
    assert index.paths() == []
