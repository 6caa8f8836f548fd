"""The index as a stat cache: libgit2 compares what changed and nothing else."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pygit2
from pygit2.ffi import C, ffi
from tests.checkpoints.helpers import write

from weft._core import read_blob
from weft.checkpoints.gitindex import StatIndex
from weft.checkpoints.trees import MODE_FILE


def _index(tmp_path: Path) -> StatIndex:
    # As the shadow repository is opened (weft.checkpoints.storage): the blobs
    # recorded here are never stored.
    pygit2.settings.enable_strict_object_creation(False)
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


def _record(index: StatIndex, root: Path, rel: str) -> None:
    """Records ``rel`` as a checkpoint does: its stat taken by read_blob before the read."""
    kind, st, _data, sha = read_blob(root / rel, 1 << 20)
    assert kind == "file"
    assert st is not None
    assert sha is not None
    index.add(rel, (MODE_FILE, sha), st)


def _saved_size(index: StatIndex, path: str) -> int:
    """The size the saved index file holds for ``path`` (0: smudged)."""
    fresh = pygit2.Index(os.path.join(index.repo.path, "index"))
    entry = C.git_index_get_bypath(fresh._index, path.encode(), 0)
    assert entry != ffi.NULL
    return int(entry.file_size)


def test_the_full_comparison_follows_adds_and_removes(tmp_path: Path) -> None:
    index = _index(tmp_path)
    ws = tmp_path / "ws"
    write(ws, "notes/a.md", "a")
    _record(index, ws, "notes/a.md")
    time.sleep(0.05)  # older than the margin: the stat vouches for it from now on
    assert index.scan(None) == ([], [], [], [])
    write(ws, "notes/b.md", "b")
    write(ws, "other/c.md", "c")
    assert index.scan(None) == ([], [], ["notes/b.md"], ["other"])
    _record(index, ws, "notes/b.md")
    index.remove("notes/a.md")
    assert index.scan(["notes"]) == ([], [], ["notes/a.md"], [])
    (ws / "notes/b.md").write_text("bb")
    assert index.scan(["notes"]) == (["notes/b.md"], [], ["notes/a.md"], [])


def test_a_saved_index_smudges_what_its_stat_cannot_vouch_for(tmp_path: Path) -> None:
    """An entry written too close to its stat is saved with size 0, so a later
    opening (which trusts entries older than the index file) reads it again."""
    index = _index(tmp_path)
    ws = tmp_path / "ws"
    write(ws, "old.md", "old")
    time.sleep(0.05)  # recorded well after its last change: trusted by its stat
    _record(index, ws, "old.md")
    index.scan(None)  # the comparison now runs on the core's copy
    write(ws, "fresh.md", "fresh")
    _record(index, ws, "fresh.md")
    index.write()
    assert _saved_size(index, "old.md") == 3
    assert _saved_size(index, "fresh.md") == 0
    # Opened again: the smudged entry is compared by content, the other by stat.
    reopened = StatIndex(
        index.repo, pygit2.Index(os.path.join(index.repo.path, "index")), index.root
    )
    assert reopened.scan(None) == (["fresh.md"], [], [], [])


def test_a_file_gone_before_its_stat_is_recorded_without_one(tmp_path: Path) -> None:
    """Found in review: the stand-in stat had no nanosecond times and raised."""
    index = _index(tmp_path)
    index.add_from_disk("gone.md", (MODE_FILE, pygit2.hash(b"gone").raw))
    assert index.paths() == ["gone.md"]
    assert index.scan(None) == ([], ["gone.md"], [], [])


def test_a_comparison_never_saves_the_index(tmp_path: Path) -> None:
    """Every save goes through write(), which smudges what the stat cannot vouch
    for: libgit2 refreshing stat data during a diff saved the file behind it."""
    index = _index(tmp_path)
    ws = tmp_path / "ws"
    write(ws, "notes/a.md", "a")
    _record(index, ws, "notes/a.md")
    index.write()
    saved = os.path.join(index.repo.path, "index")
    before = os.stat(saved).st_mtime_ns
    time.sleep(0.01)
    os.utime(ws / "notes/a.md")  # a stat change, the same content
    write(ws, "notes/b.md", "b")
    assert _changes(index, ["notes"]) == [("?", "notes/b.md")]  # a.md hashed: the same
    assert os.stat(saved).st_mtime_ns == before
