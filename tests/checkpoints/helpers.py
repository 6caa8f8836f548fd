"""Helpers shared by the checkpoint tests: the git CLI as an independent reader, disk views."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pygit2
from tests.checkpoints.oracle import covered

from weft.checkpoints import CheckpointRepo, run_branch

#: (mode, blob sha) of one file, in git's notation.
FileState = tuple[str, str]


def git(repo: CheckpointRepo, *args: str, check: bool = True) -> str:
    """Runs the git CLI on the shadow repository with its isolated environment."""
    result = subprocess.run(
        ["git", *args],
        env=repo.git_env(),
        capture_output=True,
        text=True,
        errors="surrogateescape",  # names as the file system has them (os.fsdecode)
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def tree_state(repo: CheckpointRepo, sha: str) -> dict[str, FileState]:
    """What git itself says checkpoint ``sha`` holds: path -> (mode, blob sha)."""
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", sha)
    files: dict[str, FileState] = {}
    for record in out.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, _kind, blob = meta.split()
        files[path] = (mode, blob)
    return files


def file_state(path: Path) -> FileState | None:
    """The (mode, blob sha) git would record for the file at ``path``, or None."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "120000", str(pygit2.hash(os.fsencode(os.readlink(path))))
    if stat.S_ISREG(st.st_mode):
        mode = "100755" if st.st_mode & 0o100 else "100644"
        return mode, str(pygit2.hash(path.read_bytes()))
    return None


def disk_state(workspace: Path) -> dict[str, FileState]:
    """Every regular file and symlink in the workspace: path -> (mode, blob sha)."""
    files: dict[str, FileState] = {}
    for root, dirs, names in os.walk(workspace):
        rel_root = os.path.relpath(root, workspace)
        for name in [*names, *[d for d in dirs if os.path.islink(os.path.join(root, d))]]:
            rel = name if rel_root == "." else f"{rel_root}/{name}"
            state = file_state(Path(root) / name)
            if state is not None:
                files[rel] = state
    return files


def covered_state(workspace: Path, patterns: list[str]) -> dict[str, FileState]:
    """The files the reference model says a checkpoint with ``patterns`` must hold."""
    return {p: s for p, s in disk_state(workspace).items() if covered(patterns, p)}


def write(workspace: Path, rel: str, data: bytes | str = b"x", *, executable: bool = False) -> Path:
    """Writes a workspace file, creating its directories."""
    path = workspace / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(0o755 if executable else 0o644)
    return path


def snap(
    repo: CheckpointRepo,
    patterns: list[str],
    *,
    run: str = "r1",
    codon: str = "c1",
    kind: str = "completed",
    parent: str | None = None,
    timestamp: str | None = None,
) -> str:
    """A checkpoint on ``run-<run>``, on top of its tip (or of the initial commit)."""
    branch = run_branch(run)
    if parent is None:
        parent = repo.branch_tip(branch) or repo.initial_sha
    return repo.snapshot(
        patterns,
        branch=branch,
        parent_expected=parent,
        kind=kind,
        codon_id=codon,
        run_id=run,
        codon_name=f"Codon {codon}",
        duration_ms=5,
        timestamp=timestamp,
    )
