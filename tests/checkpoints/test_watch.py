"""The inotify change watcher: which paths it reports, and when it asks for a full scan."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import weft.checkpoints.watch as watch_module
from weft.checkpoints.patterns import is_excluded
from weft.checkpoints.watch import MAX_DIRTY, ChangeWatcher, filesystem_type

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="inotify is Linux-only"
)


@pytest.fixture
def watcher(workspace: Path) -> Iterator[ChangeWatcher]:
    (workspace / "old").mkdir()
    (workspace / "old" / "f.txt").write_text("x")
    started = ChangeWatcher.start(workspace, skip=is_excluded)
    assert started is not None
    assert started.take() is None, "nothing is trusted before the first full comparison"
    yield started
    started.close()


def test_file_changes_are_reported(watcher: ChangeWatcher, workspace: Path) -> None:
    (workspace / "a.txt").write_text("new")
    (workspace / "old" / "f.txt").write_text("changed")
    assert watcher.take() == {"a.txt", "old/f.txt"}
    assert watcher.take() == set(), "a take clears the slate"
    (workspace / "a.txt").chmod(0o755)
    (workspace / "old" / "f.txt").unlink()
    assert watcher.take() == {"a.txt", "old/f.txt"}


def test_more_events_than_one_read_holds_are_all_taken(
    watcher: ChangeWatcher, workspace: Path
) -> None:
    # ~230 bytes an event, several per file: far more than one 64 KiB read.
    names = {f"{i:04d}-{'n' * 200}" for i in range(700)}
    for name in names:
        (workspace / name).write_text("x")
    assert watcher.peek(len(names)) is not None
    assert watcher.take(drain=False) == names
    (workspace / "late.txt").write_text("after the peek")
    assert watcher.take(drain=False) == set(), "not drained: the kernel still holds it"
    assert watcher.take() == {"late.txt"}


def test_new_directories_are_reported_and_watched(watcher: ChangeWatcher, workspace: Path) -> None:
    deep = workspace / "n1" / "n2"
    deep.mkdir(parents=True)
    (deep / "early.txt").write_text("written before the watch existed")
    assert watcher.take() == {"n1"}
    (deep / "late.txt").write_text("seen through the new watch")
    assert watcher.take() == {"n1/n2/late.txt"}


def test_renamed_directories_report_both_names(watcher: ChangeWatcher, workspace: Path) -> None:
    os.rename(workspace / "old", workspace / "moved")
    assert watcher.take() == {"old", "moved"}
    (workspace / "moved" / "g.txt").write_text("under the new name")
    assert watcher.take() == {"moved/g.txt"}


def test_a_directory_moved_out_is_forgotten(
    watcher: ChangeWatcher, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    os.rename(workspace / "old", outside)
    assert watcher.take() == {"old"}
    (outside / "f.txt").write_text("outside the workspace now")
    assert watcher.take() == set()


def test_runtime_paths_are_not_watched(watcher: ChangeWatcher, workspace: Path) -> None:
    (workspace / ".weft").mkdir()
    (workspace / ".weft" / "state.json").write_text("{}")
    (workspace / "old" / ".git").mkdir()
    assert watcher.take() == set()


def test_losing_the_workspace_asks_for_a_full_comparison(
    watcher: ChangeWatcher, workspace: Path
) -> None:
    shutil.rmtree(workspace)
    assert watcher.take() is None


def test_too_many_changes_ask_for_a_full_comparison(
    watcher: ChangeWatcher, workspace: Path
) -> None:
    for i in range(MAX_DIRTY + 1):
        (workspace / "old" / f"{i}.txt").write_bytes(b"")
        watcher.drain()  # keep the kernel queue from overflowing first
    assert watcher.take() is None
    (workspace / "old" / "after.txt").write_text("x")
    assert watcher.take() == {"old/after.txt"}


def test_invalidate_forces_one_full_comparison(watcher: ChangeWatcher, workspace: Path) -> None:
    (workspace / "a.txt").write_text("x")
    watcher.invalidate()
    assert watcher.take() is None
    (workspace / "b.txt").write_text("x")
    assert watcher.take() == {"b.txt"}


def test_the_filesystem_type_is_what_stat_reports(workspace: Path) -> None:
    out = subprocess.run(["stat", "-f", "-c", "%t", str(workspace)], capture_output=True, text=True)
    assert filesystem_type(workspace) == int(out.stdout.strip(), 16)


def test_network_and_fuse_filesystems_are_not_watched(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = filesystem_type(workspace)
    assert local is not None
    monkeypatch.setattr(watch_module, "REMOTE_FILESYSTEMS", frozenset({local}))
    assert ChangeWatcher.start(workspace, skip=is_excluded) is None
