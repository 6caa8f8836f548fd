"""Pack files written by Weft are packs git itself accepts."""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weft.checkpoints import packs as packs_module
from weft.checkpoints.packs import (
    OBJ_BLOB,
    OBJ_TREE,
    consolidate_packs,
    geometric_merge,
    object_id,
    pack_object_ids,
    write_pack,
)


def _bare(path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(path), bare=True)


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", f"--git-dir={repo}", *args], env=env, capture_output=True, text=True, check=True
    ).stdout


def test_object_ids_are_gits(tmp_path: Path) -> None:
    for data in (b"", b"hello\n", os.urandom(5000)):
        assert object_id(OBJ_BLOB, data) == pygit2.hash(data).raw


@settings(max_examples=20, deadline=None)
@given(st.lists(st.binary(max_size=40_000), min_size=1, max_size=12))
def test_git_reads_and_verifies_a_written_pack(blobs: list[bytes]) -> None:
    path = Path(tempfile.mkdtemp(prefix="weft-pack-"))
    repo = _bare(path / "r.git")
    objects = [(OBJ_BLOB, object_id(OBJ_BLOB, b), b) for b in blobs]
    name = write_pack(path / "r.git/objects/pack", [*objects, *objects[:1]])
    assert name is not None
    listed = _git(path / "r.git", "verify-pack", "-v", str(path / f"r.git/objects/pack/{name}.idx"))
    assert sum(1 for line in listed.splitlines() if " blob " in line) == len(
        {o[1] for o in objects}
    )
    for _kind, sha, data in objects:
        blob = repo.get(pygit2.Oid(raw=sha))
        assert isinstance(blob, pygit2.Blob)
        assert blob.data == data
    assert sorted(pack_object_ids(path / f"r.git/objects/pack/{name}.idx")) == sorted(
        {o[1].hex() for o in objects}
    )


def test_nothing_to_write_writes_nothing(tmp_path: Path) -> None:
    _bare(tmp_path / "r.git")
    assert write_pack(tmp_path / "r.git/objects/pack", []) is None
    assert list((tmp_path / "r.git/objects/pack").iterdir()) == []


def test_consolidation_merges_small_packs_and_keeps_every_object(tmp_path: Path) -> None:
    repo = _bare(tmp_path / "r.git")
    pack_dir = tmp_path / "r.git/objects/pack"
    shas = []
    for i in range(8):
        body = f"blob number {i}\n".encode() * 50
        sha = object_id(OBJ_BLOB, body)
        tree = b"100644 f\x00" + sha
        write_pack(pack_dir, [(OBJ_BLOB, sha, body), (OBJ_TREE, object_id(OBJ_TREE, tree), tree)])
        shas.append(sha)
    assert consolidate_packs(repo, over=10) == 0, "below the threshold nothing happens"
    assert consolidate_packs(repo, over=3) == 7
    repo.free()
    assert len(list(pack_dir.glob("*.idx"))) == 2
    fresh = pygit2.Repository(str(tmp_path / "r.git"))
    for sha in shas:
        assert fresh.get(pygit2.Oid(raw=sha)) is not None


def test_a_merge_stops_at_merge_max_bytes_and_git_reads_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _bare(tmp_path / "r.git")
    pack_dir = tmp_path / "r.git/objects/pack"
    for i in range(8):
        body = f"blob number {i}\n".encode() * 50
        write_pack(pack_dir, [(OBJ_BLOB, object_id(OBJ_BLOB, body), body)])
    size = (pack_dir / next(pack_dir.glob("*.idx")).name).with_suffix(".pack").stat().st_size
    monkeypatch.setattr(packs_module, "MERGE_MAX", 3 * size + size // 2)
    assert consolidate_packs(repo, over=3) == 3, "only as many packs as fit MERGE_MAX"
    repo.free()
    assert len(list(pack_dir.glob("*.idx"))) == 6
    verified = subprocess.run(
        ["git", "verify-pack", "-v", *map(str, pack_dir.glob("*.idx"))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr


def test_geometric_merge_keeps_packs_that_are_already_far_apart() -> None:
    sizes = {Path(f"pack-s{i}.idx"): 10 for i in range(10)}
    sizes |= {Path("pack-base.idx"): 1000, Path("pack-a.idx"): 400, Path("pack-b.idx"): 200}
    merged = geometric_merge(sizes)
    assert sorted(p.name for p in merged) == sorted(f"pack-s{i}.idx" for i in range(10))


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=40), st.integers(min_value=100, max_value=400))
def test_a_long_run_rewrites_each_object_about_log_n_times(per_round: int, rounds: int) -> None:
    # Each round adds `per_round` one-checkpoint packs, then merges as the repository does.
    sizes: dict[Path, int] = {Path("pack-base.idx"): 1}
    rewritten = serial = 0
    for _ in range(rounds):
        for _ in range(per_round):
            serial += 1
            sizes[Path(f"pack-{serial}.idx")] = 1
        merged = geometric_merge(sizes)
        if len(merged) > 1:
            total = sum(sizes.pop(p) for p in merged)
            rewritten += total
            serial += 1
            sizes[Path(f"pack-{serial}.idx")] = total
    objects = sum(sizes.values())
    assert rewritten <= objects * (2 + 2 * math.log2(objects))
    assert len(sizes) <= per_round + 2 + 2 * math.log2(objects)


def test_writing_the_same_pack_again_is_a_no_op_even_without_root(tmp_path: Path) -> None:
    """A replayed checkpoint log writes a pack git may already have (named by its
    content; read-only files, which only root could truncate)."""
    _bare(tmp_path / "r.git")
    pack_dir = tmp_path / "r.git/objects/pack"
    body = b"the same objects\n"
    objects = [(OBJ_BLOB, object_id(OBJ_BLOB, body), body)]
    name = write_pack(pack_dir, objects)
    assert name is not None
    before = {p.name: p.stat().st_mtime_ns for p in pack_dir.iterdir()}
    assert write_pack(pack_dir, objects) == name
    assert {p.name: p.stat().st_mtime_ns for p in pack_dir.iterdir()} == before
    (pack_dir / f"{name}.idx").unlink()  # a pack cut short before its index
    assert write_pack(pack_dir, objects) == name
    assert (pack_dir / f"{name}.idx").exists()
