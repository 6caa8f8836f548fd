"""weft.paths: paths built from ids and hank values stay inside their root."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft.errors import UnsafePathError
from weft.paths import component, contains, folder_below, inside


def test_inside_returns_the_path_and_refuses_escapes_and_links_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    assert inside(root, "sub/new.log", what="a log") == root / "sub" / "new.log"
    assert inside(root, "sub/../x", what="a log") == root / "sub/../x"
    for bad in ("../x", "sub/../../x", "/etc/passwd", "link/x", "a\x00b"):
        with pytest.raises(UnsafePathError) as caught:
            inside(root, bad, what="a log")
        message = str(caught.value)
        assert message.startswith("a log (")
        assert "\x00" not in message
        assert "\n" not in message
    assert not (tmp_path / "x").exists()


def test_component_takes_one_plain_name() -> None:
    assert component("a.b-1_c", what="x") == "a.b-1_c"
    for bad in ("", ".", "..", "a/b", "a\\b", "a\x00"):
        with pytest.raises(UnsafePathError):
            component(bad, what="the name")


def test_contains_resolves_dotdot(tmp_path: Path) -> None:
    assert contains(tmp_path, tmp_path)
    assert contains(tmp_path, tmp_path / "a" / "b")
    assert not contains(tmp_path / "a", tmp_path / "a" / ".." / "b")
    assert not contains(tmp_path / "a", tmp_path / "ab")


_NAMES = st.sampled_from(["a", "b", "in", "out", "..", ".", "f"])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parts=st.lists(_NAMES, min_size=1, max_size=5),
    absolute=st.booleans(),
    via=st.sampled_from(["root", "root/missing/..", "alias", "alias/f/..", "root/./a/.."]),
)
def test_inside_agrees_with_resolving_every_link(
    tmp_path: Path, parts: list[str], absolute: bool, via: str
) -> None:
    """The shortcut for plain names under no link judges as the full resolution does."""
    root = tmp_path / "root"
    if not root.exists():
        (tmp_path / "outside" / "a").mkdir(parents=True)
        (root / "a" / "b").mkdir(parents=True)
        (root / "f").write_text("file")
        (root / "a" / "in").symlink_to(root / "a" / "b")
        (root / "a" / "out").symlink_to(tmp_path / "outside")
        (root / "out").symlink_to(tmp_path / "outside" / "a")
        (root / "b").symlink_to("a/out")
        (tmp_path / "alias").symlink_to(root)
    start = tmp_path / via  # the root as a caller may spell it
    rel = "/".join(parts)
    path = f"{start}/{rel}" if absolute else rel
    expected = contains(start, start / path)
    try:
        inside(start, path, what="a path")
    except UnsafePathError:
        assert not expected, path
    else:
        assert expected, path


def test_a_root_through_a_missing_folder_and_dotdot_gets_the_full_check(tmp_path: Path) -> None:
    """The kernel finds nothing under ``r/missing/..``; realpath reads it as ``r``,
    where ``out`` is a link out: the shortcut must not judge it by name."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "out").symlink_to(tmp_path / "outside")
    root = tmp_path / "r" / "missing" / ".."
    with pytest.raises(UnsafePathError):
        inside(root, "out/x", what="a path")


def _write_below(root: Path, path: str) -> None:
    with folder_below(root, path, what="an output") as (folder, name):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=folder)
        os.write(fd, b"x")
        os.close(fd)


def test_folder_below_makes_missing_folders_and_opens_the_file_s_folder(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _write_below(root, "a/b/c.txt")
    _write_below(root, "a/./b/../b/d.txt")
    assert (root / "a/b/c.txt").read_bytes() == b"x"
    assert (root / "a/b/d.txt").read_bytes() == b"x"


def test_folder_below_never_goes_through_a_link_made_after_a_check(tmp_path: Path) -> None:
    """The path was fine when checked; then a folder on the way became a link
    out (or a file): nothing is written outside, and the error says why."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "reports").mkdir(parents=True)
    outside.mkdir()
    inside(root, "reports/log.md", what="a log")  # the check at load: passes
    (root / "reports").rmdir()
    (root / "reports").symlink_to(outside)
    with pytest.raises(UnsafePathError) as caught:
        _write_below(root, "reports/log.md")
    assert "reports" in str(caught.value)
    assert "link" in str(caught.value)
    (root / "deep").mkdir()
    (root / "deep/er").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        _write_below(root, "deep/er/x/log.md")
    (root / "file").write_text("")
    with pytest.raises(UnsafePathError):
        _write_below(root, "file/log.md")
    for escape in ("../x.md", "a/../../x.md", "/etc/x.md", "."):
        with pytest.raises(UnsafePathError):
            _write_below(root, escape)
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "x.md").exists()


def test_folder_below_leaves_a_link_as_the_file_name_to_the_caller(tmp_path: Path) -> None:
    """The last name is the caller's to open with O_NOFOLLOW: a link there is
    refused by the open (ELOOP), so nothing is written through it."""
    root, outside = tmp_path / "root", tmp_path / "outside.md"
    root.mkdir()
    outside.write_text("")
    (root / "log.md").symlink_to(outside)
    with pytest.raises(OSError, match="Too many levels of symbolic links") as caught:
        _write_below(root, "log.md")
    assert caught.value.errno == errno.ELOOP
    assert outside.read_text() == ""
