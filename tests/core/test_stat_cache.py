"""weft._core.StatCache: the index's stat data, and the work tree compared with it."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weft._core import FileStat, StatCache, read_blob

BIG = 1 << 25
MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
SEC = 1_000_000_000
MS = 1_000_000
ALL = [b""]
Scan = tuple[list[str], list[str], list[str], list[str]]
NOTHING: Scan = ([], [], [], [])
StatTuple = tuple[int, int, int, int]


def blob_id(data: bytes) -> bytes:
    """Git's blob id of ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).digest()


WRONG_SHA = blob_id(b"not what the file holds")


@dataclass(frozen=True)
class Record:
    """What the checkpoint code gives ``StatCache.set`` for one path."""

    path: bytes
    mode: int
    sha: bytes
    stat: StatTuple
    taken_ns: int

    def into(self, cache: StatCache) -> None:
        cache.set(self.path, self.mode, self.sha, self.stat, self.taken_ns)


def stat_tuple(fs: FileStat | os.stat_result) -> StatTuple:
    return (fs.st_ino, fs.st_size, fs.st_mtime_ns, fs.st_ctime_ns)


def full(root: str | Path, rel: bytes) -> bytes:
    return os.path.join(os.fsencode(root), rel)


def record(root: str | Path, rel: bytes) -> Record:
    """Reads ``rel`` as a checkpoint does and returns what it would record."""
    kind, fs, _data, sha = read_blob(os.fsdecode(full(root, rel)), BIG)
    assert kind in ("file", "link"), (rel, kind)
    assert fs is not None
    assert sha is not None
    mode = MODE_LINK if kind == "link" else MODE_EXEC if fs.st_mode & 0o100 else MODE_FILE
    return Record(rel, mode, sha, stat_tuple(fs), fs.taken_ns)


def cache_of(records: Iterable[Record]) -> StatCache:
    cache = StatCache()
    for r in records:
        r.into(cache)
    return cache


def write(root: str | Path, rel: str | bytes, data: bytes = b"x") -> None:
    """Writes the file ``rel`` under ``root``, making its folders."""
    path = full(root, os.fsencode(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def git_mode(st_mode: int) -> int | None:
    if stat.S_ISLNK(st_mode):
        return MODE_LINK
    if stat.S_ISREG(st_mode):
        return MODE_EXEC if st_mode & 0o100 else MODE_FILE
    return None


def content(path: bytes, mode: int) -> bytes:
    if mode == MODE_LINK:
        return os.readlink(path)
    with open(path, "rb") as fh:
        return fh.read()


def under(path: bytes, root: bytes) -> bool:
    return root == b"" or path == root or path.startswith(root + b"/")


def is_real_dir(path: bytes) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass
class Expected:
    """The scan's answer worked out in Python, by ``lstat`` and ``listdir``.

    ``must_change`` are the held paths whose kind, mode or content differ;
    ``may_change`` adds those whose stat alone differs (the caller hashes them).
    """

    must_change: set[bytes] = field(default_factory=set)
    may_change: set[bytes] = field(default_factory=set)
    gone: set[bytes] = field(default_factory=set)
    untracked: set[bytes] = field(default_factory=set)
    untracked_dirs: set[bytes] = field(default_factory=set)


def expected(root: str, records: dict[bytes, Record], roots: list[bytes]) -> Expected:
    base = os.fsencode(root)
    folders = {p[:i] for p in records for i in range(len(p)) if p[i : i + 1] == b"/"}
    ex = Expected()
    seen: set[bytes] = set()

    def visit(rel: bytes) -> None:
        path = os.path.join(base, rel)
        try:
            st_ = os.lstat(path)
        except FileNotFoundError:
            return
        held = records.get(rel)
        if stat.S_ISDIR(st_.st_mode):
            if held is not None:
                seen.add(rel)
                ex.must_change.add(rel)
                ex.may_change.add(rel)
            if rel in folders:
                enter(rel)
            else:
                ex.untracked_dirs.add(rel)
            return
        mode = git_mode(st_.st_mode)
        if held is None:
            if mode is not None:
                ex.untracked.add(rel)
            return
        seen.add(rel)
        if mode != held.mode or blob_id(content(path, held.mode)) != held.sha:
            ex.must_change.add(rel)
            ex.may_change.add(rel)
        elif stat_tuple(st_) != held.stat:
            ex.may_change.add(rel)

    def enter(rel: bytes) -> None:
        for name in os.listdir(os.path.join(base, rel)):
            if name != b".git":
                visit(rel + b"/" + name if rel else name)

    for r in roots:
        parts = [p for p in r.split(b"/") if p]
        if any(p in (b".git", b".", b"..") for p in parts):
            continue
        if not parts:
            enter(b"")
        elif all(is_real_dir(os.path.join(base, *parts[:i])) for i in range(1, len(parts))):
            visit(b"/".join(parts))
    ex.gone = {p for p in records if p not in seen and any(under(p, r) for r in roots)}
    return ex


def check(got: Scan, root: str, records: dict[bytes, Record], roots: list[bytes]) -> None:
    """Asserts ``got`` is the scan of ``root`` under ``roots`` against ``records``."""
    for part in got:
        assert part == sorted(part, key=os.fsencode), "sorted by the paths' bytes"
        assert len(set(part)) == len(part), "no path twice"
    changed, gone, untracked, untracked_dirs = ({os.fsencode(p) for p in part} for part in got)
    ex = expected(root, records, roots)
    assert ex.must_change - changed == set(), "a changed path was missed"
    assert changed - ex.may_change == set(), "a path reported changed that is not"
    assert sorted(gone) == sorted(ex.gone)
    assert sorted(untracked) == sorted(ex.untracked)
    assert sorted(untracked_dirs) == sorted(ex.untracked_dirs)


# ---- random trees and edits -------------------------------------------------

NAMES = ("a", "b", "c", "d")
LEAVES = ("f", "g", "h", "a")  # mostly not a folder's name
LINK_TARGETS = (b".", b"..", b"a", b"a/b", b"nowhere", b"../../..")
OPS = (
    "append",
    "rewrite",
    "same_tick",
    "touch",
    "delete",
    "chmod",
    "fifo",
    "retarget",
    "add_file",
    "add_dir",
    "file_to_dir",
    "dir_to_link",
    "dir_to_file",
)


def inventory(root: bytes) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """The files, links and real folders under ``root`` (``b""`` included), not
    following links, ``.git`` left out."""
    files: list[bytes] = []
    links: list[bytes] = []
    dirs: list[bytes] = [b""]
    stack = [b""]
    while stack:
        rel = stack.pop()
        for name in sorted(os.listdir(os.path.join(root, rel))):
            if name == b".git":
                continue
            sub = rel + b"/" + name if rel else name
            mode = os.lstat(os.path.join(root, sub)).st_mode
            if stat.S_ISDIR(mode):
                dirs.append(sub)
                stack.append(sub)
            elif stat.S_ISLNK(mode):
                links.append(sub)
            elif stat.S_ISREG(mode):
                files.append(sub)
    return files, links, dirs


def build(root: bytes, nodes: Iterable[tuple[list[str], str, bytes, bool]]) -> list[bytes]:
    """Makes the files, executables and links ``nodes`` describe (one whose
    place is taken is left out); returns the paths to record."""
    held = []
    for parts, kind, data, keep in nodes:
        rel = "/".join(parts).encode()
        prefixes = [
            os.path.join(root, *[p.encode() for p in parts[:i]]) for i in range(1, len(parts))
        ]
        if os.path.lexists(os.path.join(root, rel)):
            continue
        if any(os.path.lexists(p) and not is_real_dir(p) for p in prefixes):
            continue
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if kind == "link":
            os.symlink(LINK_TARGETS[data[0] % len(LINK_TARGETS)], path)
        else:
            with open(path, "wb") as fh:
                fh.write(data)
            if kind == "exec":
                os.chmod(path, 0o755)
        if keep:
            held.append(rel)
    return held


def edit(root: bytes, op: str, pick: int, data: bytes) -> bytes | None:
    """Applies one edit ``op`` to the ``pick``-th fitting entry under ``root``;
    returns the file a ``same_tick`` rewrite changed."""
    files, links, dirs = inventory(root)
    targets = {
        "append": files,
        "rewrite": [f for f in files if os.path.getsize(os.path.join(root, f))],
        "same_tick": [f for f in files if os.path.getsize(os.path.join(root, f))],
        "touch": files,
        "delete": files + links,
        "chmod": files,
        "fifo": files,
        "retarget": links,
        "add_file": dirs,
        "add_dir": dirs,
        "file_to_dir": files + links,
        "dir_to_link": dirs[1:],
        "dir_to_file": dirs[1:],
    }[op]
    if not targets:
        return None
    rel = targets[pick % len(targets)]
    path = os.path.join(root, rel)
    new_name = (*NAMES, "e")[data[0] % 5].encode()
    if op == "append":
        with open(path, "ab") as fh:
            fh.write(data)
    elif op in ("rewrite", "same_tick"):  # the same size, another content, the same inode
        with open(path, "r+b") as fh:
            old = fh.read()
            fh.seek(0)
            fh.write(bytes(b ^ 0xFF for b in old))
    elif op == "touch":  # the same content, another stat
        mtime = os.lstat(path).st_mtime_ns
        os.utime(path, ns=(mtime, mtime - SEC))
    elif op == "delete":
        os.unlink(path)
    elif op == "chmod":
        os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) ^ 0o111)
    elif op == "fifo":
        os.unlink(path)
        os.mkfifo(path)
    elif op == "retarget":
        os.unlink(path)
        os.symlink(b"elsewhere/" + data.hex().encode(), path)
    elif op == "add_file":
        if not os.path.lexists(os.path.join(path, new_name)):
            with open(os.path.join(path, new_name), "wb") as fh:
                fh.write(data)
    elif op == "add_dir":
        folder = os.path.join(path, new_name + b"_dir")
        if not os.path.lexists(folder):
            os.mkdir(folder)
            with open(os.path.join(folder, b"inside"), "wb") as fh:
                fh.write(data)
    elif op == "file_to_dir":
        os.unlink(path)
        os.mkdir(path)
        if data[0] % 2:
            with open(os.path.join(path, b"inside"), "wb") as fh:
                fh.write(data)
    elif op == "dir_to_link":  # the folder moves aside; a link to it takes its place
        moved = path + b".moved"
        if not os.path.lexists(moved):
            os.rename(path, moved)
            os.symlink(os.path.basename(moved), path)
    elif op == "dir_to_file":
        shutil.rmtree(path)
        with open(path, "wb") as fh:
            fh.write(data)
    return rel if op == "same_tick" else None


def apply_edit(root: bytes, records: dict[bytes, Record], op: str, pick: int, data: bytes) -> None:
    """Applies ``edit``; a file rewritten by ``same_tick`` gets the stat it has now
    in its record, with the old content's blob id and ``taken_ns`` at its ctime:
    a second write in the clock tick of the first, which left the stat as it
    was (only hashing the file tells)."""
    rel = edit(root, op, pick, data)
    if rel is not None and rel in records:
        now = os.lstat(os.path.join(root, rel))
        old = records[rel]
        records[rel] = Record(rel, old.mode, old.sha, stat_tuple(now), now.st_ctime_ns)


def disjoint_roots(roots: list[bytes]) -> list[bytes]:
    """Drops the roots nested in others, as ``PatternSet.scan_roots`` does."""
    kept: list[bytes] = []
    for r in sorted(set(roots)):
        if not any(under(r, k) for k in kept):
            kept.append(r)
    return kept


node = st.tuples(
    st.builds(
        lambda folders, leaf: [*folders, leaf],
        st.lists(st.sampled_from(NAMES), max_size=3),
        st.sampled_from(LEAVES),
    ),
    st.sampled_from(("file", "file", "exec", "link")),
    st.binary(min_size=1, max_size=40),
    st.booleans() | st.just(True),
)
one_edit = st.tuples(st.sampled_from(OPS), st.integers(0, 1000), st.binary(min_size=1, max_size=20))
a_root = st.lists(st.sampled_from((*NAMES, *LEAVES, "e", "a_dir")), max_size=3).map(
    lambda parts: "/".join(parts).encode()
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    nodes=st.lists(node, min_size=1, max_size=16),
    edits=st.lists(one_edit, min_size=1, max_size=10),
    roots=st.lists(a_root, max_size=3),
)
def test_a_scan_finds_what_changed_went_and_came_after_random_edits(
    tmp_path: Path,
    nodes: list[tuple[list[str], str, bytes, bool]],
    edits: list[tuple[str, int, bytes]],
    roots: list[bytes],
) -> None:
    """Every recorded path is read as the checkpoint reads it (so each is racily
    clean, and a rewrite in the same clock tick must still be seen); after the
    edits, the scan on one thread and on four agrees with a walk in Python,
    for the whole tree and for some roots."""
    root = tempfile.mkdtemp(dir=tmp_path)
    base = os.fsencode(root)
    records = {rel: record(root, rel) for rel in build(base, nodes)}
    for op, pick, data in edits:
        apply_edit(base, records, op, pick, data)

    one = cache_of(records.values())
    got = one.scan(root, ALL, 1)
    check(got, root, records, ALL)
    assert cache_of(records.values()).scan(root, ALL, 4) == got
    assert one.scan(root, ALL, 4) == got, "a second scan (racy entries refreshed) agrees"
    kept = disjoint_roots(roots)
    check(one.scan(root, kept, 1), root, records, kept)
    assert len(one) == len(records)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_tree_of_more_than_1024_entries_scans_alike_on_one_thread_and_many(
    tmp_path: Path, seed: int
) -> None:
    """From 1,024 entries the walk shares the folders among threads: whatever
    their number, the answer is the same, and the right one."""
    rng = random.Random(seed)
    root = str(tmp_path)
    base = os.fsencode(root)
    for i in range(1200):
        rel = f"d{i % 40:02}/s{i % 3}/f{i}" if i % 5 else f"d{i % 40:02}/f{i}"
        write(root, rel, b"%d\n" % i * (i % 7))
        if i % 97 == 0:
            os.chmod(os.path.join(root, rel), 0o755)
    for i in range(0, 40, 9):
        os.symlink("..", os.path.join(root, f"d{i:02}", "up"))
    os.mkdir(os.path.join(root, "empty"))
    paths = inventory(base)
    records = {rel: record(root, rel) for rel in paths[0] + paths[1] if rng.random() < 0.97}
    assert len(records) > 1100
    for _ in range(60):
        data = rng.randbytes(rng.randint(1, 9))
        apply_edit(base, records, rng.choice(OPS), rng.randrange(10_000), data)

    results = [cache_of(records.values()).scan(root, ALL, threads) for threads in (1, 2, 4, 8)]
    assert all(r == results[0] for r in results[1:])
    check(results[0], root, records, ALL)
    assert any(results[0]), "the edits show"
    roots = [b"d01", b"d02/s1", b"d05/f5", b"d07/s2/f1", b"empty", b"nope"]
    many = [cache_of(records.values()).scan(root, roots, threads) for threads in (1, 4)]
    assert many[0] == many[1]
    check(many[0], root, records, roots)


# ---- racily clean entries -------------------------------------------------------------


def settled(path: Path, data: bytes) -> FileStat:
    """Writes ``path`` with a modification time in the past whose nanoseconds are
    not whole milliseconds (so the 20 ms margin applies, not the 2 s one), and
    returns its stat as ``read_blob`` takes it."""
    path.write_bytes(data)
    mtime = time.time_ns() - SEC
    mtime += 123_457 - mtime % MS
    os.utime(path, ns=(mtime, mtime))
    _kind, fs, _data, _sha = read_blob(path, BIG)
    assert fs is not None
    assert fs.st_mtime_ns == mtime
    return fs


def test_racy_entries_by_their_times_and_the_margin() -> None:
    """An entry is racy while its newer time plus the margin is after ``taken_ns``:
    20 ms, or 2 s for a modification time in whole milliseconds (a file system
    that may keep whole seconds)."""
    t = 1_700_000_000 * SEC + 123_456_789
    whole = 1_700_000_000 * SEC + 5 * MS
    cases = {
        b"just_racy": (t, t, t + 20 * MS - 1, True),
        b"just_trusted": (t, t, t + 20 * MS, False),
        b"ctime_later": (t - SEC, t, t + 20 * MS - 1, True),
        b"ctime_later_trusted": (t - SEC, t, t + 20 * MS, False),
        b"mtime_later": (t, t - SEC, t + 20 * MS - 1, True),
        b"whole_ms_racy": (whole, whole, whole + 2 * SEC - 1, True),
        b"whole_ms_racy_at_20ms": (whole, whole, whole + 20 * MS, True),
        b"whole_ms_trusted": (whole, whole, whole + 2 * SEC, False),
        b"whole_ms_mtime_newer_ctime": (whole, t + SEC, t + SEC + SEC, True),
        b"taken_at_zero": (t, t, 0, True),
        b"dir/taken_before": (t, t, t - SEC, True),
    }
    cache = StatCache()
    for path, (mtime, ctime, taken, _racy) in cases.items():
        cache.set(path, MODE_FILE, WRONG_SHA, (1, 2, mtime, ctime), taken)
    want = sorted(p.decode() for p, case in cases.items() if case[3])
    assert cache.racy_paths() == want
    # A later record with a later taken_ns vouches for the same stat.
    cache.set(b"just_racy", MODE_FILE, WRONG_SHA, (1, 2, t, t), t + SEC)
    assert "just_racy" not in cache.racy_paths()


def test_a_racy_entry_with_another_content_is_changed(tmp_path: Path) -> None:
    """The stat matches, but was taken too close to the write to vouch: the file
    is hashed, and the blob id held is not its content's."""
    fs = settled(tmp_path / "f.txt", b"one")
    cache = StatCache()
    cache.set(b"f.txt", MODE_FILE, WRONG_SHA, stat_tuple(fs), fs.st_mtime_ns)
    assert cache.racy_paths() == ["f.txt"]
    time.sleep(0.05)
    assert cache.scan(str(tmp_path), ALL, 1) == (["f.txt"], [], [], [])
    assert cache.racy_paths() == ["f.txt"], "a different content never makes it trusted"
    assert cache.scan(str(tmp_path), ALL, 4) == (["f.txt"], [], [], [])


def test_a_trusted_entry_is_vouched_for_by_its_stat_alone(tmp_path: Path) -> None:
    """Taken well after the file's times, the same stat means the same content:
    the file is not read (the wrong blob id held goes unnoticed, as in git)."""
    fs = settled(tmp_path / "f.txt", b"one")
    cache = StatCache()
    taken = max(fs.st_mtime_ns, fs.st_ctime_ns) + 10 * SEC
    cache.set(b"f.txt", MODE_FILE, WRONG_SHA, stat_tuple(fs), taken)
    assert cache.racy_paths() == []
    assert cache.scan(str(tmp_path), ALL, 1) == NOTHING
    # The stat is what vouches: with another size it is changed after all.
    size_off = (fs.st_ino, fs.st_size + 1, fs.st_mtime_ns, fs.st_ctime_ns)
    cache.set(b"f.txt", MODE_FILE, blob_id(b"one"), size_off, taken)
    assert cache.scan(str(tmp_path), ALL, 1) == (["f.txt"], [], [], [])


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_racy_entry_with_the_same_content_becomes_trusted(tmp_path: Path, kind: str) -> None:
    """Hashed during the scan and found the same, the entry is not reported and
    takes the scan's start as its new ``taken_ns``: 50 ms after the write it
    is racy no more."""
    if kind == "file":
        settled(tmp_path / "f", b"same content")
    else:
        settled(tmp_path / "target", b"")
        (tmp_path / "f").symlink_to("some/target")
        mtime = os.lstat(tmp_path / "target").st_mtime_ns
        os.utime(tmp_path / "f", ns=(mtime, mtime), follow_symlinks=False)
    rec = record(tmp_path, b"f")
    assert rec.sha == blob_id(b"same content" if kind == "file" else b"some/target")
    assert rec.stat[2] % MS, "the 20 ms margin applies"
    cache = cache_of([Record(rec.path, rec.mode, rec.sha, rec.stat, rec.stat[3])])  # at its ctime
    assert cache.racy_paths() == ["f"]
    time.sleep(0.05)
    assert cache.scan(str(tmp_path), [b"f"], 1) == NOTHING
    assert cache.racy_paths() == []
    assert cache.scan(str(tmp_path), ALL, 1) == ([], [], ["target"] if kind == "link" else [], [])


# ---- links, .git, roots --------------------------------------------------------------


def test_links_are_never_followed(tmp_path: Path) -> None:
    """A folder replaced by a link to a folder holding the same names: its held
    files are gone and the link is a new file; a scan root through the link
    finds nothing. Held links to ``.`` and ``..`` are not entered."""
    root = tmp_path / "work"
    outside = tmp_path / "outside"
    write(root, "d/x", b"same")
    write(root, "keep", b"k")
    write(outside, "x", b"same")
    write(outside, "sub/y", b"y")
    (root / "loop").symlink_to(".")
    (root / "up").symlink_to("..")
    records = [record(root, p) for p in (b"d/x", b"keep", b"loop", b"up")]
    shutil.rmtree(root / "d")
    (root / "d").symlink_to(outside)
    for threads in (1, 4):
        assert cache_of(records).scan(str(root), ALL, threads) == ([], ["d/x"], ["d"], [])
    cache = cache_of(records)
    assert cache.scan(str(root), [b"d"], 1) == ([], ["d/x"], ["d"], [])
    assert cache.scan(str(root), [b"d/x"], 1) == ([], ["d/x"], [], [])
    assert cache.scan(str(root), [b"d/sub"], 1) == NOTHING
    assert cache.scan(str(root), [b"d/sub/y"], 1) == NOTHING
    assert cache.scan(str(root), [b"loop/keep"], 1) == NOTHING
    # The work tree's own path may be a link: that one is followed.
    (tmp_path / "alias").symlink_to(root)
    assert cache.scan(str(tmp_path / "alias"), ALL, 1) == ([], ["d/x"], ["d"], [])


def test_a_folder_replaced_by_a_file_or_a_file_by_a_folder(tmp_path: Path) -> None:
    write(tmp_path, "d/x")
    write(tmp_path, "f")
    write(tmp_path, "g")
    cache = cache_of(record(tmp_path, p) for p in (b"d/x", b"f", b"g"))
    shutil.rmtree(tmp_path / "d")
    write(tmp_path, "d", b"now a file")
    os.unlink(tmp_path / "f")
    write(tmp_path, "f/inside")
    os.unlink(tmp_path / "g")
    os.mkfifo(tmp_path / "g")
    os.mkfifo(tmp_path / "fifo")  # nothing git holds: not reported
    assert cache.scan(str(tmp_path), ALL, 1) == (["f", "g"], ["d/x"], ["d"], ["f"])
    assert cache.scan(str(tmp_path), [b"d/x"], 1) == ([], ["d/x"], [], [])


def test_git_folders_and_files_are_skipped_at_every_depth(tmp_path: Path) -> None:
    write(tmp_path, ".git/HEAD", b"ref: refs/heads/main\n")
    write(tmp_path, ".git/objects/ab/cdef")
    write(tmp_path, "sub/.git", b"gitdir: ../.git/modules/sub\n")
    write(tmp_path, "sub/f")
    write(tmp_path, "sub/deep/.git/config")
    write(tmp_path, "sub/deep/g")
    write(tmp_path, "sub/deep/.gitignore")  # only the name .git is skipped
    write(tmp_path, "sub/deep/.git2/x")
    write(tmp_path, "new/.git/x")
    cache = cache_of(record(tmp_path, p) for p in (b"sub/f", b"sub/deep/g"))
    want: Scan = ([], [], ["sub/deep/.gitignore"], ["new", "sub/deep/.git2"])
    for threads in (1, 4):
        assert cache.scan(str(tmp_path), ALL, threads) == want
    for root in (b".git", b".git/HEAD", b"sub/.git", b"sub/deep/.git/config", b"sub/./f"):
        assert cache.scan(str(tmp_path), [root], 1) == NOTHING, root


def test_roots_limit_the_walk_and_what_is_gone(tmp_path: Path) -> None:
    for rel in ("a/1", "a/2", "a/b/3", "b/1", "top.txt"):
        write(tmp_path, rel, rel.encode())
    cache = cache_of(record(tmp_path, p) for p in (b"a/1", b"a/2", b"a/b/3", b"b/1", b"top.txt"))
    os.unlink(tmp_path / "a/2")
    with open(tmp_path / "top.txt", "ab") as fh:
        fh.write(b" more")
    shutil.rmtree(tmp_path / "b")
    write(tmp_path, "a/new")
    write(tmp_path, "a/nd/f")
    write(tmp_path, "c/f")
    root = str(tmp_path)
    assert cache.scan(root, ALL, 1) == (["top.txt"], ["a/2", "b/1"], ["a/new"], ["a/nd", "c"])
    assert cache.scan(root, [b"a"], 1) == ([], ["a/2"], ["a/new"], ["a/nd"])
    assert cache.scan(root, [b"top.txt"], 1) == (["top.txt"], [], [], []), "a file root"
    assert cache.scan(root, [b"b"], 1) == ([], ["b/1"], [], []), "a root that is not there"
    assert cache.scan(root, [b"b/1"], 1) == ([], ["b/1"], [], [])
    assert cache.scan(root, [b"a/b", b"top.txt"], 1) == (["top.txt"], [], [], [])
    assert cache.scan(root, [b"c"], 1) == ([], [], [], ["c"]), "a folder nothing held is under"
    assert cache.scan(root, [b"a/new"], 1) == ([], [], ["a/new"], [])
    assert cache.scan(root, [b"top.txt/x"], 1) == NOTHING, "a root under a file"
    assert cache.scan(root, [b"nope/x"], 1) == NOTHING
    assert cache.scan(root, [], 1) == NOTHING


@pytest.mark.parametrize("spelling", [b"a/", b"/a", b"a//"])
def test_a_root_spelled_with_extra_slashes_finds_what_is_gone(
    tmp_path: Path, spelling: bytes
) -> None:
    write(tmp_path, "a/1")
    write(tmp_path, "a/2")
    cache = cache_of(record(tmp_path, p) for p in (b"a/1", b"a/2"))
    os.unlink(tmp_path / "a/2")
    write(tmp_path, "a/new")
    assert cache.scan(str(tmp_path), [b"a"], 1) == ([], ["a/2"], ["a/new"], [])
    assert cache.scan(str(tmp_path), [spelling], 1) == ([], ["a/2"], ["a/new"], [])
    # Overlapping roots find each path once.
    assert cache.scan(str(tmp_path), [b"a", spelling, b"a/new"], 1) == ([], ["a/2"], ["a/new"], [])
    assert cache.scan(str(tmp_path), [b"", b"a"], 1) == ([], ["a/2"], ["a/new"], [])


# ---- errors, set, remove, len ---------------------------------------------------------


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_an_unreadable_folder_raises_an_os_error_naming_it(tmp_path: Path) -> None:
    write(tmp_path, "d/sub/x")
    write(tmp_path, "e/y")
    write(tmp_path, "locked_new/z")
    cache = cache_of(record(tmp_path, p) for p in (b"d/sub/x", b"e/y"))
    locked = [tmp_path / "d/sub", tmp_path / "locked_new"]
    for folder in locked:
        folder.chmod(0)
    try:
        for threads in (1, 4):
            with pytest.raises(PermissionError) as caught:
                cache.scan(str(tmp_path), ALL, threads)
            assert caught.value.errno == errno.EACCES
            assert caught.value.strerror == os.strerror(errno.EACCES)
            assert caught.value.filename == "d/sub"
        with pytest.raises(PermissionError) as caught:
            cache.scan(str(tmp_path), [b"d/sub/x"], 1)
        assert caught.value.filename == "d/sub"
        # Outside the roots, or in a folder nothing held is under, it is not read.
        assert cache.scan(str(tmp_path), [b"e"], 1) == NOTHING
        assert cache.scan(str(tmp_path), [b"e", b"locked_new"], 1) == ([], [], [], ["locked_new"])
    finally:
        for folder in locked:
            folder.chmod(0o755)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_a_racy_file_that_cannot_be_read_is_changed_for_the_caller_to_read(
    tmp_path: Path,
) -> None:
    """Hashing a racy entry is the walk's business only when it can: an
    unreadable file is handed back as changed (the caller's read raises)."""
    write(tmp_path, "secret", b"s")
    (tmp_path / "secret").chmod(0)
    now = os.lstat(tmp_path / "secret")
    cache = StatCache()
    cache.set(b"secret", MODE_FILE, blob_id(b"s"), stat_tuple(now), now.st_ctime_ns)
    assert cache.scan(str(tmp_path), ALL, 1) == (["secret"], [], [], [])


def test_a_work_tree_that_is_not_there_raises(tmp_path: Path) -> None:
    cache = cache_of([Record(b"x", MODE_FILE, WRONG_SHA, (1, 1, 1, 1), 0)])
    with pytest.raises(FileNotFoundError) as caught:
        cache.scan(str(tmp_path / "nope"), ALL, 1)
    assert caught.value.errno == errno.ENOENT
    write(tmp_path, "file")
    with pytest.raises(NotADirectoryError):
        cache.scan(str(tmp_path / "file"), ALL, 1)


@pytest.mark.parametrize("size", [0, 19, 21, 40])
def test_a_blob_id_is_20_bytes(size: int) -> None:
    cache = StatCache()
    with pytest.raises(ValueError, match=f"20 bytes, not {size}"):
        cache.set(b"f", MODE_FILE, b"\x01" * size, (1, 2, 3, 4), 5)
    with pytest.raises(ValueError, match=f"20 bytes, not {size}"):
        cache.load([(b"f", MODE_FILE, b"\x01" * size, 1, 2, 3, 4, 5, 6)], 7)
    assert len(cache) == 0


def test_len_set_and_remove(tmp_path: Path) -> None:
    """``len`` counts the paths; setting one twice keeps one; removing what is not
    held changes nothing."""
    cache = StatCache()
    assert len(cache) == 0
    cache.set(b"a/x", MODE_FILE, WRONG_SHA, (1, 2, 3, 4), 5)
    cache.set(b"a/x", MODE_EXEC, WRONG_SHA, (1, 2, 3, 4), 5)
    cache.set(b"b", MODE_LINK, WRONG_SHA, (1, 2, 3, 4), 5)
    assert len(cache) == 2
    cache.remove(b"zz")
    cache.remove(b"a")
    cache.remove(b"a/x/y")
    assert len(cache) == 2
    assert cache.scan(str(tmp_path), ALL, 1) == ([], ["a/x", "b"], [], [])
    cache.remove(b"a/x")
    cache.remove(b"a/x")
    assert len(cache) == 1
    assert cache.scan(str(tmp_path), ALL, 1) == ([], ["b"], [], [])
    cache.remove(b"b")
    assert len(cache) == 0
    assert cache.scan(str(tmp_path), ALL, 1) == NOTHING


def test_a_folder_whose_last_held_file_is_removed_is_no_longer_entered(tmp_path: Path) -> None:
    """Held once more by ``set`` (a change of mode), ``a/b/x`` is one path: one
    ``remove`` forgets it, and its folders hold nothing held any more."""
    for rel in ("a/b/x", "a/y", "a/b/new"):
        write(tmp_path, rel)
    rx, ry = record(tmp_path, b"a/b/x"), record(tmp_path, b"a/y")
    cache = cache_of([rx, ry])
    Record(rx.path, MODE_EXEC, rx.sha, rx.stat, rx.taken_ns).into(cache)
    rx.into(cache)
    root = str(tmp_path)
    assert cache.scan(root, ALL, 1) == ([], [], ["a/b/new"], [])
    cache.remove(b"a/b/x")
    assert cache.scan(root, ALL, 1) == ([], [], [], ["a/b"])
    cache.remove(b"a/y")
    assert cache.scan(root, ALL, 1) == ([], [], [], ["a"])
    rx.into(cache)
    assert cache.scan(root, ALL, 1) == ([], [], ["a/b/new", "a/y"], [])


# ---- load ----------------------------------------------------------------------


def i32(value: int) -> int:
    return ((value + (1 << 31)) % (1 << 32)) - (1 << 31)


def index_entry(r: Record, sha: bytes) -> tuple[bytes, int, bytes, int, int, int, int, int, int]:
    """``r`` as a git index entry holds it (32-bit fields, as ``gitindex`` reads them)."""
    ino, size, mtime, ctime = r.stat
    return (
        r.path,
        r.mode,
        sha,
        ino & 0xFFFFFFFF,
        size & 0xFFFFFFFF,
        i32(mtime // SEC),
        mtime % SEC,
        i32(ctime // SEC),
        ctime % SEC,
    )


def test_load_takes_index_entries_with_truncated_fields_as_set_does(tmp_path: Path) -> None:
    """Times after 2038 and before 1970 wrap or go below zero in the index's
    32-bit fields; ``set``, given the full values (or values 2**32 apart), and
    ``load``, given the index's, compare the same. A wrong blob id with a stat
    taken long after shows that the stat alone decides."""
    write(tmp_path, "now", b"n")
    write(tmp_path, "later", b"l")
    write(tmp_path, "earlier", b"e")
    write(tmp_path, "edited", b"x")
    (tmp_path / "link").symlink_to("now")
    for name, ns in (("later", (1 << 31) * SEC + 1000 * SEC + 5), ("earlier", -1_500_000_000)):
        os.utime(tmp_path / name, ns=(ns, ns))
        if os.lstat(tmp_path / name).st_mtime_ns != ns:
            pytest.skip(f"the file system cannot keep the time {ns}")
    records = [record(tmp_path, p) for p in (b"now", b"later", b"earlier", b"edited", b"link")]
    taken = time.time_ns() + 3600 * SEC
    with open(tmp_path / "edited", "ab") as fh:
        fh.write(b"more")
    write(tmp_path, "new")

    by_set = cache_of(Record(r.path, r.mode, WRONG_SHA, r.stat, taken) for r in records)
    shifted = StatCache()
    for r in records:
        ino, size, mtime, ctime = r.stat
        far = (ino + (1 << 32), size + (3 << 32), mtime + (1 << 32) * SEC, ctime - (1 << 32) * SEC)
        shifted.set(r.path, r.mode, WRONG_SHA, far, taken)
    by_load = StatCache()
    by_load.set(b"dropped/by/load", MODE_FILE, WRONG_SHA, (1, 2, 3, 4), 5)
    by_load.load([index_entry(r, WRONG_SHA) for r in records], taken)
    assert len(by_load) == len(records)
    want: Scan = (["edited"], [], ["new"], [])
    for cache in (by_set, shifted, by_load):
        assert cache.racy_paths() == []
        assert cache.scan(str(tmp_path), ALL, 1) == want

    # Taken as read, the entries are racy alike, and hashed alike.
    first = min(r.taken_ns for r in records)
    by_set = cache_of(Record(r.path, r.mode, r.sha, r.stat, first) for r in records)
    by_load = StatCache()
    by_load.load([index_entry(r, r.sha) for r in records], first)
    assert by_load.racy_paths() == by_set.racy_paths()
    assert by_load.scan(str(tmp_path), ALL, 1) == by_set.scan(str(tmp_path), ALL, 1) == want


def test_load_replaces_what_was_held(tmp_path: Path) -> None:
    write(tmp_path, "a/x")
    write(tmp_path, "b/y")
    cache = cache_of([record(tmp_path, b"a/x")])
    cache.load([index_entry(record(tmp_path, b"b/y"), blob_id(b"x"))], time.time_ns())
    assert len(cache) == 1
    assert cache.scan(str(tmp_path), ALL, 1) == ([], [], [], ["a"])
    cache.load([], 0)
    assert len(cache) == 0
    assert cache.scan(str(tmp_path), ALL, 1) == ([], [], [], ["a", "b"])


# ---- names ---------------------------------------------------------------------


def test_names_that_are_not_utf8_come_back_as_the_file_system_decodes_them(
    tmp_path: Path,
) -> None:
    root = tmp_path / os.fsdecode(b"w\xf6rk")
    held = b"na\xefve/x"
    write(root, held, b"held")
    write(root, b"na\xefve/gone\xff")
    write(root, b"caf\xe9.txt", b"new")
    write(root, b"d\xe9j\xe0/inside")
    write(root, "caf\u00e9_utf8.txt")
    os.symlink(b"t\xe9rget", os.path.join(os.fsencode(root), b"l\xefnk"))
    records = [record(root, p) for p in (held, b"na\xefve/gone\xff", b"l\xefnk")]
    cache = cache_of(records)
    assert cache.racy_paths() == sorted(os.fsdecode(r.path) for r in records)
    with open(full(root, held), "ab") as fh:
        fh.write(b" more")
    os.unlink(full(root, b"na\xefve/gone\xff"))
    got = cache.scan(str(root), ALL, 1)
    names = ["caf\u00e9_utf8.txt", os.fsdecode(b"caf\xe9.txt")]
    assert got == (
        [os.fsdecode(held)],
        [os.fsdecode(b"na\xefve/gone\xff")],
        sorted(names, key=os.fsencode),
        [os.fsdecode(b"d\xe9j\xe0")],
    )
    assert got[2][1] == "caf\udce9.txt"
    assert cache.scan(str(root), [held], 1)[0] == [os.fsdecode(held)]


def test_a_large_racy_file_is_hashed_without_holding_it(tmp_path: Path) -> None:
    """Found in review: a racily clean file was read whole into memory (a 64 GiB
    sparse file aborted the process); it is hashed a block at a time. Measured in
    a fresh process: this one's peak may already be above the file's size."""
    size = 512 << 20
    path = tmp_path / "big.bin"
    with open(path, "wb") as fh:
        fh.truncate(size)  # sparse: no disk, and reading it costs little
    script = textwrap.dedent(
        """
        import os, resource, sys
        from weft._core import StatCache
        root, wrong = sys.argv[1], bytes.fromhex(sys.argv[2])
        st = os.lstat(os.path.join(root, "big.bin"))
        cache = StatCache()
        stat = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        cache.set(b"big.bin", 0o100644, wrong, stat, st.st_mtime_ns)  # racy
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert cache.scan(root, [b""], 2) == (["big.bin"], [], [], []), "not compared"
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), WRONG_SHA.hex()],
        capture_output=True,
        text=True,
        check=True,
    )
    grown_kib = int(done.stdout)
    assert grown_kib < 64 * 1024, f"peak memory grew by {grown_kib} KiB"
