"""Writing a checkpoint's new objects as one pack file instead of many loose objects.

libgit2 writes every object as its own loose file (create, write, rename), which
costs tens of microseconds each; a checkpoint of ten files spread over a deep
tree writes forty-odd objects. Writing them together as one version-2 pack plus
its index is two files, whatever the count. Packs are immutable, so a reader
either sees the complete pack (the ``.idx`` is renamed into place last) or none
of it. Many small packs are merged into one by :func:`consolidate_packs`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal, overload

import pygit2

#: git object type codes, as used in pack entry headers.
OBJ_COMMIT = 1
OBJ_TREE = 2
OBJ_BLOB = 3
_TYPE_NAMES = {OBJ_COMMIT: b"commit", OBJ_TREE: b"tree", OBJ_BLOB: b"blob"}

#: Small packs merged into one once there are more than this many of them.
CONSOLIDATE_OVER = 24
#: Each pack left after a merge is at least this many times the next smaller one.
GEOMETRIC = 2
#: A merge writes at most this many bytes of packs into one (a version-2 pack
#: index without its large-offset table addresses 2 GiB).
MERGE_MAX = 1 << 30
_DEFLATE_OVER = 16 * 1024


def object_id(kind: int, data: bytes) -> bytes:
    """The binary SHA-1 git gives the object ``kind`` with body ``data``."""
    h = hashlib.sha1(_TYPE_NAMES[kind], usedforsecurity=False)
    h.update(b" %d\x00" % len(data))
    h.update(data)
    return h.digest()


def _entry_header(kind: int, size: int) -> bytes:
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def write_pack(
    pack_dir: Path,
    objects: Iterable[tuple[int, bytes, bytes]],
    *,
    deflate_over: int = _DEFLATE_OVER,
) -> str | None:
    """Writes ``(kind, binary_sha, data)`` objects as one pack; returns its name or ``None``.

    Duplicates are written once. Objects may already exist elsewhere in the
    repository: git allows an object in several packs, and checking first would
    cost a pack-directory rescan per missing object.
    """
    seen: dict[bytes, tuple[int, int]] = {}  # sha -> (offset, crc32)
    parts: list[bytes] = []
    offset = 12
    for kind, sha, data in objects:
        if sha in seen:
            continue
        # Small objects (trees, most source files) are stored, not deflated: zlib costs
        # more than the bytes it saves here, and consolidation deflates them.
        level = 1 if len(data) > _DEFLATE_OVER else 0
        entry = _entry_header(kind, len(data)) + zlib.compress(data, level)
        seen[sha] = (offset, zlib.crc32(entry))
        parts.append(entry)
        offset += len(entry)
    if not seen:
        return None
    if offset >= 1 << 31:
        raise ValueError("checkpoint pack would exceed 2 GiB; large files go loose instead")
    header = b"PACK" + struct.pack(">II", 2, len(seen))
    body = header + b"".join(parts)
    pack_sha = hashlib.sha1(body, usedforsecurity=False).digest()
    pack_bytes = body + pack_sha

    name = "pack-" + pack_sha.hex()
    if (pack_dir / f"{name}.idx").exists():
        return name  # named by its content: these objects are there already (a replay)
    # Readers discover packs by their .idx, so the pack may be written in place; the
    # index appears atomically, last. A pack left without an index is swept at open.
    (pack_dir / f"{name}.pack").unlink(missing_ok=True)  # read-only, and cut short
    _write_file(pack_dir / f"{name}.pack", pack_bytes)
    _write_index(pack_dir, name, seen, pack_sha)
    return name


def _write_index(
    pack_dir: Path, name: str, seen: Mapping[bytes, tuple[int, int]], pack_sha: bytes
) -> None:
    """Writes ``name``'s version-2 index (sha -> (offset, crc32)), renamed into place."""
    shas = sorted(seen)
    fanout = [0] * 256
    for sha in shas:
        fanout[sha[0]] += 1
    running = 0
    for i in range(256):
        running += fanout[i]
        fanout[i] = running
    idx = bytearray(b"\xfftOc" + struct.pack(">I", 2))
    idx += struct.pack(">256I", *fanout)
    idx += b"".join(shas)
    idx += struct.pack(f">{len(shas)}I", *(seen[s][1] for s in shas))
    idx += struct.pack(f">{len(shas)}I", *(seen[s][0] for s in shas))
    idx += pack_sha
    idx += hashlib.sha1(idx, usedforsecurity=False).digest()
    tmp = pack_dir / f"tmp_{name}_{os.getpid()}.idx"
    _write_file(tmp, bytes(idx))
    os.replace(tmp, pack_dir / f"{name}.idx")


def _merge_pack(repo: pygit2.Repository, pack_dir: Path, ids: Sequence[bytes]) -> None:
    """Writes the objects ``ids`` as one pack, one object at a time (a merge
    may hold more than fits in memory), whole and deflated."""
    tmp = pack_dir / f"tmp_merge_{os.getpid()}_{os.urandom(4).hex()}.pack"
    seen: dict[bytes, tuple[int, int]] = {}
    digest = hashlib.sha1(usedforsecurity=False)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        header = b"PACK" + struct.pack(">II", 2, len(ids))
        _write_all(fd, header)
        digest.update(header)
        offset = len(header)
        odb = repo.odb
        for sha in ids:
            kind, data = odb.read(pygit2.Oid(raw=sha))
            entry = _entry_header(int(kind), len(data)) + zlib.compress(data, 1)
            seen[sha] = (offset, zlib.crc32(entry))
            _write_all(fd, entry)
            digest.update(entry)
            offset += len(entry)
        pack_sha = digest.digest()
        _write_all(fd, pack_sha)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    name = "pack-" + pack_sha.hex()
    os.replace(tmp, pack_dir / f"{name}.pack")
    _write_index(pack_dir, name, seen, pack_sha)


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def sweep_orphan_packs(pack_dir: Path) -> list[Path]:
    """Removes pack files whose index was never written (a crash mid-write); returns them."""
    removed: list[Path] = []
    try:
        names = set(os.listdir(pack_dir))
    except FileNotFoundError:
        return removed
    for name in names:
        if name.endswith(".pack") and name[:-5] + ".idx" not in names:
            with contextlib.suppress(FileNotFoundError):
                (pack_dir / name).unlink()
                removed.append(pack_dir / name)
    return removed


def small_packs(pack_dir: Path) -> list[Path]:
    """The ``.idx`` files of the packs to merge: never the largest (the
    consolidated base), and of the others the smallest, as many as it takes
    for every pack left to be at least :data:`GEOMETRIC` times the size of
    the merged one and of each smaller pack left.

    Merging every pack but the largest each time rewrote the whole history
    since that pack at every consolidation, so a 10,000-checkpoint run spent
    ever longer in it (O(n) per checkpoint). A geometric progression of pack
    sizes, as ``git repack --geometric`` keeps, rewrites each object about
    log(n) times in all, and keeps the pack count logarithmic.
    """
    try:
        idxs = [p for p in pack_dir.iterdir() if p.suffix == ".idx" and p.name.startswith("pack-")]
    except FileNotFoundError:
        return []
    if len(idxs) <= 1:
        return []
    return geometric_merge({p: _pack_size(p) for p in idxs})


def geometric_merge(sizes: Mapping[Path, int]) -> list[Path]:
    """Of packs with these sizes, those :func:`small_packs` merges (see there)."""
    if len(sizes) <= 1:
        return []
    ordered = sorted(sizes, key=lambda p: (sizes[p], p.name))[:-1]
    # From the large end, the packs that already form the progression stay...
    split = len(ordered)
    while split > 1 and sizes[ordered[split - 2]] * GEOMETRIC <= sizes[ordered[split - 1]]:
        split -= 1
    split -= 1
    # ...and the merged pack swallows each next one it would not be far below.
    merged = sum(sizes[p] for p in ordered[:split])
    while split < len(ordered) and sizes[ordered[split]] < GEOMETRIC * merged:
        merged += sizes[ordered[split]]
        split += 1
    return ordered[:split] if split >= 2 else []


def _pack_size(idx: Path) -> int:
    try:
        return idx.with_suffix(".pack").stat().st_size
    except OSError:
        return 0


@overload
def pack_object_ids(idx: Path, *, raw: Literal[False] = False) -> list[str]: ...
@overload
def pack_object_ids(idx: Path, *, raw: Literal[True]) -> list[bytes]: ...


def pack_object_ids(idx: Path, *, raw: bool = False) -> list[str] | list[bytes]:
    """The SHAs listed in a version-2 pack index (hex; binary with ``raw``)."""
    data = idx.read_bytes()
    if data[:8] != b"\xfftOc" + struct.pack(">I", 2):
        raise ValueError(f"{idx}: not a version-2 pack index")
    count = struct.unpack_from(">I", data, 8 + 255 * 4)[0]
    start = 8 + 256 * 4
    shas = [data[start + 20 * i : start + 20 * (i + 1)] for i in range(count)]
    return shas if raw else [sha.hex() for sha in shas]


def consolidate_packs(repo: pygit2.Repository, *, over: int = CONSOLIDATE_OVER) -> int:
    """Merges the small packs into one when there are more than ``over``; returns how many.

    Must run on a repository handle that no one else uses afterwards (libgit2
    may still hold the removed packs open): callers reopen the repository.
    """
    pack_dir = Path(repo.path) / "objects" / "pack"
    smalls = small_packs(pack_dir)
    if len(smalls) <= over:
        return 0
    # The merged pack's offsets must fit the index's 31 bits: the smallest
    # packs first, up to MERGE_MAX bytes (deflating only shrinks them).
    total = 0
    for count, idx in enumerate(smalls):
        total += _pack_size(idx)
        if total > MERGE_MAX:
            smalls = smalls[:count]
            break
    if len(smalls) < 2:
        return 0
    ids: dict[bytes, None] = {}
    for idx in smalls:
        ids.update(dict.fromkeys(pack_object_ids(idx, raw=True)))
    # Whole objects, deflated, no delta search: libgit2's pack builder searched
    # deltas over every merged object (its window is fixed), which made a
    # merge late in a 10,000-checkpoint run cost a third of a second, taken
    # from the codon that waited for its checkpoint. `git gc` can still
    # delta-compress the repository by hand.
    _merge_pack(repo, pack_dir, list(ids))
    for idx in smalls:
        # Index first, so a reader never finds an index without its pack.
        with contextlib.suppress(FileNotFoundError):
            idx.unlink()
        with contextlib.suppress(FileNotFoundError):
            idx.with_suffix(".pack").unlink()
    return len(smalls)
