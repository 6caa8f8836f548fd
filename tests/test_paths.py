"""weft.paths: paths built from ids and hank values stay inside their root."""

from __future__ import annotations

from pathlib import Path

import pytest

from weft.errors import UnsafePathError
from weft.paths import component, contains, inside


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
