"""weft._core.read_blob: a work-tree file read as the checkpoint stores it."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft._core import read_blob

BIG = 1 << 20


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=9000))
def test_a_file_reads_whole_with_git_s_blob_id_and_its_stat(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    kind, stat, got, sha = read_blob(path, BIG)
    assert kind == "file"
    assert got == data
    assert sha == pygit2.hash(data).raw
    assert stat is not None
    real = os.lstat(path)
    for field in ("st_mode", "st_ino", "st_dev", "st_uid", "st_gid", "st_size"):
        assert getattr(stat, field) == getattr(real, field), field
    assert (stat.st_mtime_ns, stat.st_ctime_ns) == (real.st_mtime_ns, real.st_ctime_ns)


def test_a_link_is_its_target_not_what_it_points_to(tmp_path: Path) -> None:
    (tmp_path / "target.txt").write_text("content")
    (tmp_path / "link").symlink_to("target.txt")
    (tmp_path / "dangling").symlink_to("nowhere/at/all")
    kind, stat, data, sha = read_blob(tmp_path / "link", BIG)
    assert (kind, data, sha) == ("link", b"target.txt", pygit2.hash(b"target.txt").raw)
    assert stat is not None
    assert stat.st_mode & 0o170000 == 0o120000
    assert read_blob(tmp_path / "dangling", BIG)[:1] == ("link",)


def test_the_executable_bit_shows_in_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    _kind, stat, _data, _sha = read_blob(path, BIG)
    assert stat is not None
    assert stat.st_mode & 0o100


def test_what_git_cannot_hold_and_what_is_gone(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    assert read_blob(tmp_path / "dir", BIG)[0] == "dir"
    kind, stat, data, sha = read_blob(tmp_path / "fifo", BIG)  # never opened: it would block
    assert (kind, data, sha) == ("other", None, None)
    assert stat is not None
    assert read_blob(tmp_path / "missing", BIG) == ("missing", None, None, None)
    # A parent that is a file: gone too, as a deleted folder's files are.
    assert read_blob(tmp_path / "file" / "below", BIG) == ("missing", None, None, None)


def test_a_file_over_the_limit_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "large.bin"
    path.write_bytes(b"x" * 100)
    kind, stat, data, sha = read_blob(path, 99)
    assert (kind, data, sha) == ("file", None, None)
    assert stat is not None
    assert stat.st_size == 100
    assert read_blob(path, 100)[2] == b"x" * 100


@pytest.mark.parametrize("size", [(64 << 10) - 1, 64 << 10, (64 << 10) + 1, 300_000])
def test_files_on_both_sides_of_the_detached_read_read_the_same(tmp_path: Path, size: int) -> None:
    # Up to 64 KiB a file is read holding the interpreter; above, looked at again detached.
    path = tmp_path / "f.bin"
    data = os.urandom(size)
    path.write_bytes(data)
    kind, stat, got, sha = read_blob(path, BIG)
    assert (kind, got, sha) == ("file", data, pygit2.hash(data).raw)
    assert stat is not None
    assert stat.st_size == size
    kind, stat, got, sha = read_blob(path, size - 1)
    assert (kind, got, sha) == ("file", None, None)
    assert stat is not None
    assert stat.st_size == size


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_raises_the_os_error(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("x")
    path.chmod(0)
    with pytest.raises(PermissionError) as caught:
        read_blob(path, BIG)
    assert caught.value.errno == errno.EACCES
    assert caught.value.strerror == "Permission denied"


def test_other_errors_keep_their_errno_and_the_system_s_words(tmp_path: Path) -> None:
    name = tmp_path / ("n" * 300)  # longer than a file name may be
    with pytest.raises(OSError, match="too long") as caught:
        read_blob(name, BIG)
    assert caught.value.errno == errno.ENAMETOOLONG
    assert caught.value.strerror == os.strerror(errno.ENAMETOOLONG)


def test_a_name_that_is_not_utf8_is_read(tmp_path: Path) -> None:
    path = os.path.join(tmp_path, os.fsdecode(b"caf\xe9.txt"))  # Latin-1 on disk
    with open(path, "wb") as fh:
        fh.write(b"hi")
    assert read_blob(path, BIG)[:1] == ("file",)
    assert read_blob(path, BIG)[2] == b"hi"


def test_a_path_changing_kind_while_read_never_blocks_and_reads_whole(tmp_path: Path) -> None:
    """Found in review: a fifo (or a link to one) put in a file's place between its
    stat and its open made a plain open wait for a writer for ever, hanging the
    checkpoint. Another thread swaps a file, a fifo, a link and a folder into the
    path while it is read: every read ends, and gives one of them whole."""
    import threading

    path = tmp_path / "swapped"
    content = b"whole file content\n" * 100
    kinds = []
    for n in range(4):
        spare = tmp_path / f"spare{n}"
        kinds.append(spare)
    stop = threading.Event()

    def swap() -> None:
        n = 0
        while not stop.is_set():
            spare = kinds[n % 4]
            for leftover in (spare,):
                if leftover.is_dir() and not leftover.is_symlink():
                    leftover.rmdir()
                elif leftover.exists() or leftover.is_symlink():
                    leftover.unlink()
            if n % 4 == 0:
                spare.write_bytes(content)
            elif n % 4 == 1:
                os.mkfifo(spare)
            elif n % 4 == 2:
                spare.symlink_to(tmp_path / "spare1")
            else:
                spare.mkdir()
            with contextlib.suppress(OSError):  # a folder cannot replace a file by rename
                os.replace(spare, path)
            n += 1

    swapper = threading.Thread(target=swap, daemon=True)
    results: list[tuple[str, bytes | None]] = []

    def read_many() -> None:
        for _ in range(3000):
            kind, _stat, data, _sha = read_blob(path, BIG)
            results.append((kind, data))

    reader = threading.Thread(target=read_many, daemon=True)
    swapper.start()
    reader.start()
    reader.join(60)
    stop.set()
    swapper.join(10)
    assert not reader.is_alive(), "a read blocked"
    assert len(results) == 3000
    for kind, data in results:
        assert kind in ("file", "link", "dir", "other", "missing")
        if kind == "file":
            assert data == content


def test_below_a_root_no_link_is_followed(tmp_path: Path) -> None:
    """A folder the agent swapped for a link to elsewhere is not read through."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text("secret")
    work = tmp_path / "work"
    (work / "real").mkdir(parents=True)
    (work / "real" / "a.md").write_text("mine")
    os.symlink(outside, work / "notes")
    os.symlink("a.md", work / "real" / "link")

    assert read_blob("real/a.md", BIG, root=work)[2] == b"mine"
    assert read_blob("notes/a.md", BIG, root=work) == ("missing", None, None, None)
    assert read_blob(work / "notes/a.md", BIG)[2] == b"secret"  # without a root: as before
    kind, _stat, target, _sha = read_blob("real/link", BIG, root=work)  # the last part: a link
    assert (kind, target) == ("link", b"a.md")
    assert read_blob("notes", BIG, root=work)[0] == "link"
    assert read_blob("gone/a.md", BIG, root=work)[0] == "missing"
    assert read_blob("real/a.md/x", BIG, root=work)[0] == "missing"
    with pytest.raises(OSError, match=r"\.\."):
        read_blob("real/../../outside/a.md", BIG, root=work)
