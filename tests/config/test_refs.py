"""Reference safety: inside the hank, no symlinks, the right kind of file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from weft.config.refs import RefChecker, RefProblem, RefTarget, check_ref


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "hank"
    (r / "prompts" / "deep").mkdir(parents=True)
    (r / "prompts" / "a.md").write_text("a")
    (r / "prompts" / "deep" / "b.md").write_text("bb")
    (r / "sentinels").mkdir()
    (tmp_path / "outside.md").write_text("secret")
    return r.resolve()


@pytest.mark.parametrize(
    "ref", ["prompts/a.md", "./prompts/a.md", "prompts/deep/../a.md", "prompts//deep/b.md"]
)
def test_paths_inside_the_hank_are_accepted(root: Path, ref: str) -> None:
    assert check_ref(ref, root, root) is None


@pytest.mark.parametrize(
    ("ref", "words"),
    [
        ("../outside.md", "leaves the hank directory"),
        ("prompts/../../outside.md", "leaves the hank directory"),
        ("/etc/hostname", "absolute"),
        ("~/x.md", "absolute"),
        ("prompts/none.md", "does not exist"),
        ("prompts/a.md/x", "as if it were a directory"),
        ("prompts", "is a directory"),
        (".", "hank directory itself"),
        ("prompts\\a.md", "backslashes"),
    ],
)
def test_unsafe_or_wrong_paths_are_refused(root: Path, ref: str, words: str) -> None:
    problem = check_ref(ref, root, root)
    assert problem is not None
    assert words in problem.message
    assert problem.hint


def test_a_symlink_is_refused_even_when_it_points_inside(root: Path) -> None:
    (root / "alias.md").symlink_to(root / "prompts" / "a.md")
    problem = check_ref("alias.md", root, root)
    assert problem is not None
    assert "symbolic link" in problem.message


def test_a_symlinked_directory_on_the_way_is_refused(root: Path) -> None:
    (root / "p2").symlink_to(root / "prompts", target_is_directory=True)
    problem = check_ref("p2/a.md", root, root)
    assert problem is not None
    assert "(p2)" in problem.message


def test_a_fifo_is_refused(root: Path) -> None:
    os.mkfifo(root / "pipe")
    problem = check_ref("pipe", root, root)
    assert problem is not None
    assert "not a regular file" in problem.message


def test_kinds_file_dir_and_either(root: Path) -> None:
    assert check_ref("prompts", root, root, "dir") is None
    assert check_ref("prompts", root, root, "file-or-dir") is None
    assert check_ref("prompts/a.md", root, root, "file-or-dir") is None
    assert check_ref("prompts/a.md", root, root, "dir") is not None


def test_a_base_below_the_root_may_climb_to_the_root_but_not_beyond(root: Path) -> None:
    base = root / "sentinels"
    assert check_ref("../prompts/a.md", base, root) is None
    assert check_ref("../../outside.md", base, root) is not None


def test_the_checker_reports_size_and_remembers_results(root: Path) -> None:
    checker = RefChecker(root)
    found = checker.check("prompts/deep/b.md")
    assert isinstance(found, RefTarget)
    assert (found.path, found.size, found.is_dir) == (root / "prompts/deep/b.md", 2, False)
    (root / "prompts" / "deep" / "b.md").unlink()
    # Within one validation pass the answer is stable.
    assert checker.check("prompts/deep/b.md") == found
    assert isinstance(RefChecker(root).check("prompts/deep/b.md"), RefProblem)
