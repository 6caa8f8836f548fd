"""What a snapshot reads from the workspace: file kinds, bytes, ignores, nested repositories.

Checked through the public snapshot API, reading the result back with the git CLI.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.checkpoints.helpers import covered_state, file_state, snap, tree_state, write

import weft.checkpoints.scan as scan_module
from weft.checkpoints import CheckpointError, CheckpointRepo
from weft.checkpoints.gitindex import StatIndex


def test_modes_symlinks_empty_and_binary_files(repo: CheckpointRepo, workspace: Path) -> None:
    write(workspace, "bin/run.sh", "#!/bin/sh\n", executable=True)
    write(workspace, "bin/empty", b"")
    write(workspace, "bin/blob", bytes(range(256)) * 10)
    os.symlink("run.sh", workspace / "bin/link")
    os.symlink("../nowhere", workspace / "bin/dangling")
    sha = snap(repo, ["bin/"])
    tree = tree_state(repo, sha)
    assert tree == covered_state(workspace, ["bin/"])
    assert tree["bin/run.sh"][0] == "100755"
    assert tree["bin/link"][0] == tree["bin/dangling"][0] == "120000"


def test_line_endings_and_bytes_are_kept_exactly(repo: CheckpointRepo, workspace: Path) -> None:
    data = b"one\r\ntwo\rthree\n\xff\xfe"
    write(workspace, "a.txt", data)
    write(workspace, ".gitattributes", "* text eol=crlf filter=nope\n")
    sha = snap(repo, ["a.txt"])
    assert repo.files(sha) == {"a.txt": data}


def test_a_lone_new_file_in_a_tracked_folder_is_seen(repo: CheckpointRepo, workspace: Path) -> None:
    write(workspace, "notes/a.md", "a")
    snap(repo, ["notes/**"])
    write(workspace, "notes/b.md", "b")
    second = snap(repo, ["notes/**"])
    assert set(tree_state(repo, second)) == {"notes/a.md", "notes/b.md"}


def test_a_literal_file_pattern_finds_an_untracked_file(
    repo: CheckpointRepo, workspace: Path
) -> None:
    write(workspace, "README.md", "r")
    write(workspace, "docs/guide.md", "g")
    sha = snap(repo, ["README.md", "docs/guide.md"])
    assert set(tree_state(repo, sha)) == {"README.md", "docs/guide.md"}


def test_patterns_that_grow_pick_up_files_that_already_existed(
    repo: CheckpointRepo, workspace: Path
) -> None:
    write(workspace, "notes/a.md", "a")
    write(workspace, "src/main.py", "x")
    first = snap(repo, ["notes/**"])
    second = snap(repo, ["notes/**", "src/**"])
    third = snap(repo, ["src/**"])
    assert set(tree_state(repo, first)) == {"notes/a.md"}
    assert set(tree_state(repo, second)) == {"notes/a.md", "src/main.py"}
    assert set(tree_state(repo, third)) == {"src/main.py"}


def test_runtime_paths_are_never_checkpointed(
    repo: CheckpointRepo, workspace: Path, tmp_path: Path
) -> None:
    data = tmp_path / "input-data"
    data.mkdir()
    (data / "big.csv").write_text("1,2\n")
    os.symlink(data, workspace / "read_only_data_source")
    write(workspace, "rigArchive/loop-0/notes/a.md", "archived")
    write(workspace, ".weft/state.json", "{}")
    write(workspace, "sub/.Weft/x", "x")
    write(workspace, ".weft.backup-2025/state.json", "{}")
    write(workspace, "work/rigArchive/kept.md", "not at the root: kept")
    sha = snap(repo, ["**"])
    assert set(tree_state(repo, sha)) == {"work/rigArchive/kept.md"}


def test_ignored_untracked_files_stay_out_until_the_rules_change(
    repo: CheckpointRepo, workspace: Path
) -> None:
    write(workspace, ".gitignore", "*.log\nbuild/\n")
    write(workspace, "app.py", "x")
    write(workspace, "debug.log", "noise")
    write(workspace, "build/out.bin", "noise")
    first = snap(repo, ["**"])
    assert set(tree_state(repo, first)) == {".gitignore", "app.py"}
    write(workspace, ".gitignore", "build/\n")
    second = snap(repo, ["**"])
    assert set(tree_state(repo, second)) == {".gitignore", "app.py", "debug.log"}


def test_many_new_files_beside_ignored_ones(repo: CheckpointRepo, workspace: Path) -> None:
    """Past 64 new files, the ignore rules are applied in one libgit2 pass."""
    write(workspace, ".gitignore", "*.o\n")
    write(workspace, "src/main.c", "int main;")
    snap(repo, ["src/**"])
    for i in range(100):
        write(workspace, f"src/m{i}.c", f"int m{i};")
        write(workspace, f"src/m{i}.o", "object")
    sha = snap(repo, ["src/**"])
    assert set(tree_state(repo, sha)) == {"src/main.c", *(f"src/m{i}.c" for i in range(100))}
    assert tree_state(repo, sha) == {
        p: v for p, v in covered_state(workspace, ["src/**"]).items() if not p.endswith(".o")
    }


def test_names_that_are_not_utf8_are_checkpointed_and_ignored_alike(
    repo: CheckpointRepo, workspace: Path
) -> None:
    """Found in review: pygit2 encodes names as strict UTF-8, so a Latin-1 name
    made every full comparison fail."""
    root = os.fsencode(workspace)
    write(workspace, ".gitignore", "*.o\n")
    write(workspace, "d/a.txt", "a")
    snap(repo, ["**"])

    def put(rel: bytes, body: bytes) -> None:
        os.makedirs(os.path.dirname(root + b"/" + rel), exist_ok=True)
        with open(root + b"/" + rel, "wb") as fh:
            fh.write(body)

    put(b"d/caf\xe9.txt", b"x")
    put(b"top\xff.txt", b"y")
    put(b"d/skip\xe9.o", b"ignored")
    put(b"new\xe9/inner.txt", b"z")
    second = snap(repo, ["**"])
    names = {os.fsencode(p) for p in tree_state(repo, second)}
    assert names == {
        b".gitignore",
        b"d/a.txt",
        b"d/caf\xe9.txt",
        b"top\xff.txt",
        b"new\xe9/inner.txt",
    }
    for i in range(70):  # past the one-by-one ignore checks
        put(b"many/f%d\xe9.txt" % i, b"m")
        put(b"many/f%d\xe9.o" % i, b"o")
    third = snap(repo, ["**"])
    many = {p for p in map(os.fsencode, tree_state(repo, third)) if p.startswith(b"many/")}
    assert many == {b"many/f%d\xe9.txt" % i for i in range(70)}


def test_nested_git_repositories_contribute_their_files(
    repo: CheckpointRepo, workspace: Path
) -> None:
    nested = workspace / "project"
    nested.mkdir()
    subprocess.run(
        ["git", "init", "-q", str(nested)],
        check=True,
        env=repo.git_env() | {"GIT_DIR": str(nested / ".git")},
    )
    write(workspace, "project/src/app.py", "x")
    sha = snap(repo, ["project/**"])
    assert set(tree_state(repo, sha)) == {"project/src/app.py"}
    write(workspace, "project/src/app.py", "y")
    second = snap(repo, ["project/**"])
    assert tree_state(repo, second)["project/src/app.py"] == file_state(
        workspace / "project/src/app.py"
    )


def test_a_file_that_becomes_a_directory_and_back(repo: CheckpointRepo, workspace: Path) -> None:
    write(workspace, "out", "file")
    first = snap(repo, ["out"])
    (workspace / "out").unlink()
    write(workspace, "out/inner.txt", "now a directory")
    second = snap(repo, ["out"])
    shutil.rmtree(workspace / "out")
    os.symlink("elsewhere", workspace / "out")
    third = snap(repo, ["out"])
    assert set(tree_state(repo, first)) == {"out"}
    assert set(tree_state(repo, second)) == {"out/inner.txt"}
    assert tree_state(repo, third)["out"][0] == "120000"


def test_large_files_are_stored_through_libgit2(
    repo: CheckpointRepo, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan_module, "LARGE_FILE", 1000)
    write(workspace, "data/big.bin", os.urandom(5000))
    write(workspace, "data/small.bin", os.urandom(10))
    sha = snap(repo, ["data/**"])
    assert tree_state(repo, sha) == covered_state(workspace, ["data/**"])


def test_unreadable_files_fail_the_checkpoint_with_a_hint(
    repo: CheckpointRepo, workspace: Path
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    path = write(workspace, "secret.txt", "s")
    path.chmod(0)
    with pytest.raises(CheckpointError, match=r"cannot read secret.txt .*'!secret.txt'"):
        snap(repo, ["*.txt"])


def test_a_folder_the_walk_cannot_read_fails_the_checkpoint_with_a_hint(
    repo: CheckpointRepo, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root reads every folder, so the walk's refusal is played by the index."""
    write(workspace, "notes/a.md", "a")
    write(workspace, "top.md", "t")

    def refuse(self: object, roots: object) -> None:
        raise OSError(errno.EACCES, "Permission denied", refused)

    monkeypatch.setattr(StatIndex, "scan", refuse)
    refused = "notes"
    with pytest.raises(CheckpointError, match=r"cannot read notes .*'!notes/\*\*'"):
        snap(repo, ["**"])
    refused = "top.md"
    with pytest.raises(CheckpointError, match=r"cannot read top.md .*'!top.md'\."):
        snap(repo, ["**"])


def test_a_workspace_that_is_gone_fails_the_full_comparison_plainly(
    repo: CheckpointRepo, workspace: Path
) -> None:
    write(workspace, "a.md", "a")
    shutil.rmtree(workspace)
    with pytest.raises(CheckpointError, match=r"cannot read the workspace .* is readable"):
        snap(repo, ["*.md"])


_PATHS = ("a/x.txt", "a/y.txt", "a/sub/w.txt", "b/z.txt", "top.txt")
_BODIES = (b"", b"one", b"two", b"one\n" * 50)
_EDIT = st.tuples(
    st.sampled_from(("write", "touch", "chmod", "delete", "link", "dir")),
    st.sampled_from(_PATHS),
    st.sampled_from(_BODIES),
)


def _edit(workspace: Path, op: str, rel: str, body: bytes) -> None:
    path = workspace / rel
    if op != "write" and not path.exists() and not path.is_symlink():
        return
    if op in ("write", "link", "dir") and path.parent.exists() and not path.parent.is_dir():
        path.parent.unlink()  # a file stands where the folder should be
    if op in ("write", "link", "dir") and (path.is_dir() and not path.is_symlink()):
        shutil.rmtree(path)
    elif op in ("link", "dir") and (path.exists() or path.is_symlink()):
        path.unlink()
    if op == "write":
        if path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    elif op == "touch":
        os.utime(path, follow_symlinks=False)
    elif op == "chmod" and path.is_file() and not path.is_symlink():
        path.chmod(path.stat().st_mode ^ 0o111)
    elif op == "delete":
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    elif op == "link":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(body.decode() or "nowhere")
    elif op == "dir":
        path.mkdir(parents=True)
        (path / "inner.txt").write_bytes(body)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.lists(_EDIT, min_size=1, max_size=3), min_size=1, max_size=6))
def test_any_edits_are_checkpointed_exactly_with_and_without_hints(
    tmp_path_factory: pytest.TempPathFactory, steps: list[list[tuple[str, str, bytes]]]
) -> None:
    """Edits of every kind (same bytes again, a touch, a mode, links, a file
    becoming a folder): each checkpoint holds exactly the covered files, whether
    the watcher's hints are used or every file is compared."""
    patterns = ["a/**", "top.txt"]
    for watch in (True, False):
        base = tmp_path_factory.mktemp("edits")
        workspace = base / "agentRoot"
        workspace.mkdir()
        repo = CheckpointRepo.open_or_create(base / "git", workspace, watch=watch)
        try:
            for step in steps:
                for op, rel, body in step:
                    _edit(workspace, op, rel, body)
                sha = snap(repo, patterns)
                assert tree_state(repo, sha) == covered_state(workspace, patterns), (watch, step)
        finally:
            repo.close()


def test_a_folder_swapped_for_a_link_to_elsewhere_is_not_read_through(
    repo: CheckpointRepo, workspace: Path, tmp_path: Path
) -> None:
    """The watcher (or the walk) saw notes/a.md; the agent then made notes a link
    to a folder outside the workspace holding an a.md: its content must not be
    checkpointed as notes/a.md."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "a.md").write_text("secret")
    write(workspace, "notes/a.md", "mine")
    snap(repo, ["**"])
    write(workspace, "notes/a.md", "mine, edited")  # a hint for notes/a.md
    shutil.rmtree(workspace / "notes")
    os.symlink(outside, workspace / "notes")
    second = snap(repo, ["**"])
    state = tree_state(repo, second)
    assert "notes/a.md" not in state
    assert state["notes"][0] == "120000"
    assert b"secret" not in repo.files(second).values()
    repo.sync()  # the logged objects into git, to look for the secret's blob there
    secret = pygit2.hash(b"secret")
    assert pygit2.Repository(str(repo.git_dir)).get(secret) is None, "read through the link"
