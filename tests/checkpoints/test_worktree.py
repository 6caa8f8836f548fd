"""Restoring files into the workspace: layouts that stand in the way, modes, links."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.checkpoints.helpers import disk_state, snap, tree_state, write

from weft.checkpoints import CheckpointRepo
from weft.checkpoints.worktree import remove_files, write_file


def test_restore_replaces_directories_files_and_links_as_the_target_has_them(
    repo: CheckpointRepo, workspace: Path
) -> None:
    write(workspace, "x/inner.txt", "dir version")
    write(workspace, "tool", "#!/bin/sh\n", executable=True)
    os.symlink("tool", workspace / "alias")
    target = snap(repo, ["**"])
    shutil.rmtree(workspace / "x")
    write(workspace, "x", "now a file")
    (workspace / "tool").chmod(0o644)
    (workspace / "alias").unlink()
    write(workspace, "alias", "now a file")
    snap(repo, ["**"])
    repo.restore(target, ["**"])
    assert disk_state(workspace) == tree_state(repo, target)
    assert os.readlink(workspace / "alias") == "tool"


def test_removing_files_prunes_only_the_folders_left_empty(tmp_path: Path) -> None:
    write(tmp_path, "a/b/c/one.txt")
    write(tmp_path, "a/b/two.txt")
    write(tmp_path, "a/keep.txt")
    remove_files(str(tmp_path), ["a/b/c/one.txt", "a/b/two.txt", "missing/x.txt"])
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/keep.txt"]


def test_written_files_replace_whatever_is_in_the_way(tmp_path: Path) -> None:
    write(tmp_path, "x", "a file where a folder must be")
    write(tmp_path, "y/inner.txt", "a folder where a file must be")
    write_file(str(tmp_path), "x/deep/file.sh", b"#!/bin/sh\n", executable=True, link=False)
    write_file(str(tmp_path), "y", b"x/deep/file.sh", executable=False, link=True)
    assert (tmp_path / "x/deep/file.sh").read_bytes() == b"#!/bin/sh\n"
    assert os.access(tmp_path / "x/deep/file.sh", os.X_OK)
    assert os.readlink(tmp_path / "y") == "x/deep/file.sh"
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".weftcheckpoints")]
