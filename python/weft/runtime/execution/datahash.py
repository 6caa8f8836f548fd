"""Fingerprints that decide which execution a run resumes: the hank's and the data's.

:func:`hank_hash` hashes the hank's normalised JSON (formatting does not
count); :func:`hash_data` hashes the data's contents, or, when that takes
longer than the time limit, its names, sizes and modification times.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson

from weft.runtime.execution.errors import InputPathError

__all__ = ["DEFAULT_DATA_HASH_TIME_LIMIT", "NO_DATA_HASH", "DataHash", "hank_hash", "hash_data"]

DEFAULT_DATA_HASH_TIME_LIMIT = 5.0
"""Seconds spent reading data contents before falling back to a metadata hash
(the reference's ``dataHashTimeLimit``, 5000 ms; ``overrides.dataHashTimeLimit``)."""

_HASH_CHUNK = 1 << 20


def hank_hash(path: Path) -> str:
    """sha256 of the hank's normalised JSON: keys sorted, no whitespace, no ``$schema``.

    Formatting, key order and the editor-only ``$schema`` key do not count
    as changes; any change of a value does. Files the hank refers to (prompts)
    are not part of it, so editing a prompt never blocks a resume.
    """
    try:
        document = orjson.loads(path.read_bytes())
    except OSError as e:
        raise InputPathError(f"{path}: cannot read the hank ({e.strerror})") from None
    except orjson.JSONDecodeError as e:
        raise InputPathError(f"{path}: the hank is not valid JSON ({e})") from None
    if isinstance(document, dict):
        document.pop("$schema", None)
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True, slots=True)
class DataHash:
    """The fingerprint of a data path.

    ``mode`` is ``content`` (every file's bytes), ``metadata`` (names, sizes
    and modification times: the contents took longer than the time limit) or
    ``none`` (no data).
    """

    value: str
    mode: Literal["content", "metadata", "none"]
    files: int = 0
    bytes: int = 0

    @property
    def short(self) -> str:
        """Six characters for directory names."""
        return self.value[:6] if self.mode != "none" else "nodata"


NO_DATA_HASH = DataHash(hashlib.sha256(b"weft-data-v1\0none").hexdigest(), "none")


@dataclass(frozen=True, slots=True)
class _Entry:
    rel: str
    kind: Literal["d", "f", "l", "s"]
    path: Path
    size: int
    mtime_ns: int
    link: str = ""


def _list_data(path: Path) -> list[_Entry]:
    st = path.lstat()
    if stat.S_ISREG(st.st_mode):
        return [_Entry(path.name, "f", path, st.st_size, st.st_mtime_ns)]
    entries: list[_Entry] = []
    stack = [(path, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda e: e.name)
        subdirs = []
        for child in children:
            rel = f"{prefix}{child.name}"
            cst = child.stat(follow_symlinks=False)
            if stat.S_ISDIR(cst.st_mode):
                entries.append(_Entry(rel, "d", Path(child.path), 0, 0))
                subdirs.append((Path(child.path), f"{rel}/"))
            elif stat.S_ISREG(cst.st_mode):
                entries.append(_Entry(rel, "f", Path(child.path), cst.st_size, cst.st_mtime_ns))
            elif stat.S_ISLNK(cst.st_mode):
                entries.append(
                    _Entry(rel, "l", Path(child.path), 0, 0, link=os.readlink(child.path))
                )
            else:
                entries.append(_Entry(rel, "s", Path(child.path), 0, 0))
        # Reversed so that the stack pops subfolders in name order: the order
        # of the hash input must not depend on the filesystem's.
        stack.extend(reversed(subdirs))
    entries.sort(key=lambda e: e.rel.encode("utf-8", "surrogateescape"))
    return entries


def _entry_header(entry: _Entry) -> bytes:
    return entry.kind.encode() + entry.rel.encode("utf-8", "surrogateescape") + b"\0"


def hash_data(
    path: Path | None,
    *,
    time_limit: float = DEFAULT_DATA_HASH_TIME_LIMIT,
    clock: Callable[[], float] = time.monotonic,
) -> DataHash:
    """The :class:`DataHash` of ``path`` (a file or a folder, or ``None``).

    The content hash is sha256 over, in byte order of the relative paths,
    each entry's kind and path, plus a file's size and bytes, or a symlink's
    target (links are not followed). A folder's own name is not part of it
    (the agent never sees it); a file's name is (it sees ``<basename>``).

    Reading contents stops once ``time_limit`` seconds have passed; the hash
    is then computed from names, sizes and modification times only
    (``mode="metadata"``), which is fast but changes when the data is copied
    or touched. Listing the tree is never cut short.
    """
    if path is None:
        return NO_DATA_HASH
    start = clock()
    entries = _list_data(path)
    files = [e for e in entries if e.kind == "f"]
    total = sum(e.size for e in files)
    digest = hashlib.sha256(b"weft-data-v1\0content\0")
    timed_out = False
    buffer = bytearray(_HASH_CHUNK)
    view = memoryview(buffer)
    for entry in entries:
        if clock() - start > time_limit:
            timed_out = True
            break
        digest.update(_entry_header(entry))
        if entry.kind == "l":
            digest.update(entry.link.encode("utf-8", "surrogateescape") + b"\0")
        if entry.kind != "f":
            continue
        digest.update(entry.size.to_bytes(8, "big"))
        with entry.path.open("rb", buffering=0) as f:
            while (n := f.readinto(buffer)) and not timed_out:
                digest.update(view[:n])
                timed_out = clock() - start > time_limit
        if timed_out:
            break
    if not timed_out:
        return DataHash(digest.hexdigest(), "content", len(files), total)
    digest = hashlib.sha256(b"weft-data-v1\0metadata\0")
    for entry in entries:
        digest.update(_entry_header(entry))
        digest.update(f"{entry.size}:{entry.mtime_ns}:{entry.link}\0".encode(errors="replace"))
    return DataHash(digest.hexdigest(), "metadata", len(files), total)
