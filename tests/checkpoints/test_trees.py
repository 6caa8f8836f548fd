"""In-memory tree edits give exactly the trees libgit2 builds from the same files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pygit2
from hypothesis import given, settings
from hypothesis import strategies as st

from weft.checkpoints.packs import OBJ_BLOB, object_id, write_pack
from weft.checkpoints.trees import EMPTY_TREE, MODE_EXEC, MODE_FILE, MODE_LINK, TreeEditor

names = st.sampled_from(["a", "b", "a.txt", "a-b", "a.b", "z", "A", "é"])
paths = st.lists(names, min_size=1, max_size=3).map("/".join)
modes = st.sampled_from([MODE_FILE, MODE_EXEC, MODE_LINK])
file_sets = st.dictionaries(paths, st.tuples(modes, st.binary(max_size=8)), max_size=10)


def _consistent(files: dict[str, tuple[bytes, bytes]]) -> dict[str, tuple[bytes, bytes]]:
    """Drops paths that are also directories of other paths (a file cannot be a folder)."""
    return {p: v for p, v in files.items() if not any(o.startswith(p + "/") for o in files)}


def _libgit2_tree(repo: pygit2.Repository, files: dict[str, tuple[bytes, bytes]]) -> bytes:
    index = pygit2.Index()
    for path, (mode, data) in files.items():
        oid = repo.create_blob(data)
        index.add(pygit2.IndexEntry(path, oid, int(mode, 8)))
    return index.write_tree(repo).raw


@settings(max_examples=60, deadline=None)
@given(file_sets, file_sets)
def test_edits_match_libgit2(
    before: dict[str, tuple[bytes, bytes]], after: dict[str, tuple[bytes, bytes]]
) -> None:
    before, after = _consistent(before), _consistent(after)
    path = Path(tempfile.mkdtemp(prefix="weft-tree-"))
    repo = pygit2.init_repository(str(path / "r.git"), bare=True)
    editor = TreeEditor(repo)

    def entries(files: dict[str, tuple[bytes, bytes]]) -> dict[str, tuple[bytes, bytes] | None]:
        return {p: (mode, object_id(OBJ_BLOB, data)) for p, (mode, data) in files.items()}

    base, objs = editor.apply(EMPTY_TREE, entries(before))
    write_pack(path / "r.git/objects/pack", objs)
    changes: dict[str, tuple[bytes, bytes] | None] = {p: None for p in before if p not in after}
    changes.update(entries(after))
    new, objs = editor.apply(base, changes)
    write_pack(path / "r.git/objects/pack", objs)
    assert base == _libgit2_tree(repo, before)
    assert new == _libgit2_tree(repo, after)
    fresh = TreeEditor(repo)  # reads the written trees back from git, not from the cache
    assert dict(fresh.walk(new)) == entries(after)
