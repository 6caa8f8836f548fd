"""Member names an archive may hold: nothing accepted can reach outside the
folder it is imported into (property-based), and the refusals say why."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.portable.members import TOPS, member_problem

ROOT = "/imports/x"

parts = st.sampled_from(["..", ".", "", "a", "b", "weft", "agentRoot", "hank", "/", "\\", "\x00"])


@given(st.lists(parts, min_size=1, max_size=6), st.sampled_from(["file", "dir", "symlink"]),
       st.one_of(st.none(), st.lists(parts, max_size=4).map("/".join)))  # fmt: skip
def test_an_accepted_member_stays_inside_the_import_folder(
    pieces: list[str], kind: str, link: str | None
) -> None:
    name = "/".join(pieces)
    if member_problem(name, kind, link) is not None:  # type: ignore[arg-type]
        return
    where = posixpath.normpath(posixpath.join(ROOT, name))
    assert where == ROOT or where.startswith(ROOT + "/"), name
    if kind == "symlink" and link is not None and name != "agentRoot/read_only_data_source":
        target = posixpath.normpath(posixpath.join(posixpath.dirname(where), link))
        assert target.startswith(f"{ROOT}/{name.split('/')[0]}"), (name, link)


@pytest.mark.parametrize(
    ("name", "kind", "link", "words"),
    [
        ("../x", "file", None, "not a plain relative path"),
        ("/etc/passwd", "file", None, "absolute path"),
        ("elsewhere/x", "file", None, "outside the folders"),
        ("weft/dev", "other", None, "device"),
        ("agentRoot/l", "symlink", "../../etc", "links outside"),
        ("agentRoot/l", "symlink", "/etc/passwd", "absolute path"),
        ("weft/a\\b", "file", None, "backslash"),
    ],
)
def test_refusals_say_why(name: str, kind: str, link: str | None, words: str) -> None:
    problem = member_problem(name, kind, link)  # type: ignore[arg-type]
    assert problem is not None
    assert words in problem


def test_the_data_link_may_name_data_anywhere() -> None:
    assert member_problem("agentRoot/read_only_data_source", "symlink", "/home/me/data") is None
    assert all(member_problem(f"{top}/f", "file") is None for top in TOPS)
