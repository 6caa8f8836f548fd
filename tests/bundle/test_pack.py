"""What weft pack puts in a bundle, and that the same files give the same bytes."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from tests.bundle.helpers import loaded, sample_hank

from weft.bundle.errors import BundleError
from weft.bundle.lock import LOCK_NAME, Quotas, decode_lock
from weft.bundle.pack import collect, pack_hank
from weft.bundle.unpack import open_bundle


def test_a_bundle_holds_what_the_hank_references_and_nothing_else(tmp_path: Path) -> None:
    collected = collect(loaded(sample_hank(tmp_path)))
    files = {n for n, m in collected.members.items() if m.kind == "file"}
    assert files == {
        "hank.json",
        "prompts/migrate.md",
        "sentinels/cost-watch.json",
        "sentinels/cost-report.schema.json",  # a sentinel's schemaFile
        "sentinels/file-watch.json",
        "sentinels/narrator.json",
        "sentinels/prompts/narrator-system.md",  # a sentinel config's own references
        "sentinels/prompts/narrator-user.md",
        "templates/app/main.py",
        "templates/app/run.sh",
        "templates/app/lib/util.py",
        "templates/app/.gitignore",
        "config/settings.json",
    }  # not notes.txt, debug.log (default ignore rules) or scratch.tmp (nested .gitignore)
    assert collected.members["templates/app/latest"].target == "main.py"
    assert collected.members["templates/app/empty"].kind == "dir"
    assert collected.members["templates/app/run.sh"].mode == 0o755
    assert collected.members["templates/app/main.py"].mode == 0o644


def test_the_hank_folders_gitignore_goes_in_when_a_folder_is_copied(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    (hank.parent / ".gitignore").write_text("lib/\n")
    collected = collect(loaded(hank))
    assert ".gitignore" in collected.members
    assert "templates/app/lib" not in collected.members  # as the rig copy would skip it
    assert "templates/app/lib/debug.log" not in collected.members


def test_packing_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    one, two = tmp_path / "one.hank", tmp_path / "two.hank"
    pack_hank(loaded(hank), one, "1.0")
    # Another time, other mtimes and another umask's modes: the same bytes.
    os.utime(hank.parent / "prompts" / "migrate.md", (1, 1))
    (hank.parent / "config" / "settings.json").chmod(0o600)
    pack_hank(loaded(hank), two, "1.0")
    assert one.read_bytes() == two.read_bytes()
    # ...and a copy of the hank elsewhere packs to them too.
    shutil.copytree(hank.parent, tmp_path / "elsewhere", symlinks=True)
    three = tmp_path / "three.hank"
    pack_hank(loaded(tmp_path / "elsewhere" / "hank.json"), three, "1.0")
    assert three.read_bytes() == one.read_bytes()


def test_a_changed_file_changes_the_bundle_hash(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    first, _ = pack_hank(loaded(hank), tmp_path / "a.hank", "1.0")
    (hank.parent / "prompts" / "migrate.md").write_text("changed\n")
    second, _ = pack_hank(loaded(hank), tmp_path / "b.hank", "1.0")
    assert first != second


def test_the_archive_is_sorted_with_fixed_metadata_and_the_lock_first(tmp_path: Path) -> None:
    out = tmp_path / "x.hank"
    digest, collected = pack_hank(loaded(sample_hank(tmp_path)), out, "1.0")
    assert out.read_bytes()[4:8] == b"\0\0\0\0"  # gzip header: no timestamp
    with tarfile.open(out, "r:gz") as tar:
        infos = tar.getmembers()
        lock = decode_lock(tar.extractfile(LOCK_NAME).read())  # type: ignore[union-attr]
    names = [i.name for i in infos]
    assert names[0] == LOCK_NAME
    assert names[1:] == sorted(collected.members)
    assert {(i.mtime, i.uid, i.gid, i.uname, i.gname) for i in infos} == {(0, 0, 0, "", "")}
    assert lock.bundle_hash == digest
    with tarfile.open(out, "r:gz") as tar:
        data = tar.extractfile("prompts/migrate.md").read()  # type: ignore[union-attr]
    assert lock.members["prompts/migrate.md"].sha256 == hashlib.sha256(data).hexdigest()


def test_a_link_out_of_the_hank_folder_is_refused(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    (tmp_path / "secret").write_text("outside")
    (hank.parent / "templates" / "app" / "leak").symlink_to(tmp_path / "secret")
    with pytest.raises(BundleError, match=r"leak: a symbolic link to .*outside the hank folder"):
        collect(loaded(hank))
    (hank.parent / "templates" / "app" / "leak").unlink()
    (hank.parent / "templates" / "app" / "leak").symlink_to("../../../secret")
    with pytest.raises(BundleError, match=r"outside the hank folder"):
        collect(loaded(hank))


def test_a_link_to_an_unpacked_file_inside_the_hank_is_refused(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    (hank.parent / "templates" / "app" / "notes").symlink_to("../../notes.txt")
    with pytest.raises(BundleError, match=r"which is not packed"):
        collect(loaded(hank))


def test_quotas_refuse_a_hank_too_big_to_bundle(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    (hank.parent / "templates" / "app" / "big.bin").write_bytes(b"x" * 5000)
    with pytest.raises(BundleError, match=r"big.bin is 5,000 bytes, over the 4,000-byte"):
        collect(loaded(hank), Quotas(member_bytes=4000))
    with pytest.raises(BundleError, match=r"add up to over 4,000 bytes"):
        collect(loaded(hank), Quotas(total_bytes=4000))
    with pytest.raises(BundleError, match=r"over 5 members"):
        collect(loaded(hank), Quotas(members=5))
    assert not list(tmp_path.glob("*.hank"))


def test_a_failed_pack_leaves_no_bundle(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    out = tmp_path / "x.hank"
    (hank.parent / "templates" / "app" / "hank.lock").write_text("a file named like the lock")
    # Only a referenced hank.lock collides; this one is under templates/app, so fine:
    pack_hank(loaded(hank), out, "1.0")
    (hank.parent / "hank.lock").write_text("{}")
    doc = (hank.parent / "hank.json").read_text()
    (hank.parent / "hank.json").write_text(doc.replace("prompts/migrate.md", "hank.lock"))
    out.unlink()
    with pytest.raises(BundleError, match=r"named hank.lock"):
        pack_hank(loaded(hank), out, "1.0")
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_what_is_packed_extracts_to_the_same_files(tmp_path: Path) -> None:
    hank = sample_hank(tmp_path)
    out = tmp_path / "x.hank"
    _, collected = pack_hank(loaded(hank), out, "1.0")
    opened = open_bundle(out, cache=tmp_path / "cache")
    for name, member in collected.members.items():
        got = opened.folder / name
        if member.kind == "file":
            assert got.read_bytes() == (hank.parent / name).read_bytes(), name
            assert got.stat().st_mode & 0o777 == member.mode
        elif member.kind == "symlink":
            assert os.readlink(got) == member.target
        else:
            assert got.is_dir()
    assert io.BytesIO(opened.hank_file.read_bytes()).read() == hank.read_bytes()
