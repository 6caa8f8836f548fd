"""Making a bundle: which files go in (:func:`collect`), and the archive's bytes
(:func:`write_bundle`); :func:`pack_hank` does both.

**What goes in** is what the loader resolved, never a second reading of the
hank: :func:`weft.config.validate_hank` checks every reference (prompt files,
sentinel configs and their prompts and schema files, rig copy sources) with
:class:`weft.config.refs.RefChecker` and hands them over in
:attr:`~weft.config.loader.LoadedHank.references`. A referenced folder (a rig
copy source) goes in as the copy would read it (:mod:`weft.runtime.rig.copy`'s
exclusions and the hank folder's ignore rules, whose ``.gitignore`` then goes in
too), so the extracted hank copies exactly what the source one copies.

**Deterministic**: members in sorted order, the lock first; mtime 0, uid and
gid 0, no user or group name, modes reduced to ``0644``/``0755``; a PAX tar,
gzip-compressed with a zero timestamp and no file name in its header. The same
files give the same bytes (with the same zlib; the bundle hash, which names the
cache folder, does not depend on compression at all).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from weft.bundle.errors import BundleError
from weft.bundle.lock import (
    LOCK_NAME,
    Member,
    Quotas,
    bundle_hash,
    encode_lock,
    member_name_problem,
    normal_mode,
    symlink_problem,
)
from weft.config.loader import LoadedHank
from weft.runtime.rig.copy import ALWAYS_EXCLUDED
from weft.runtime.rig.ignore import IgnoreRules, is_ignored, root_rules

__all__ = ["GZIP_LEVEL", "Collected", "collect", "pack_hank", "write_bundle"]

GZIP_LEVEL = 9
"""Fixed, so the compressed bytes do not depend on a default."""

_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Collected:
    """The members of a bundle-to-be, each with the file it comes from."""

    hank: str
    """The hank file's member name."""
    members: dict[str, Member]
    sources: dict[str, Path]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class _Collector:
    def __init__(self, root: Path, quotas: Quotas) -> None:
        self.root = root
        self.quotas = quotas
        self.members: dict[str, Member] = {}
        self.sources: dict[str, Path] = {}
        self.total = 0

    def name_of(self, path: Path) -> str:
        name = path.relative_to(self.root).as_posix()
        problem = member_name_problem(name)
        if problem is not None:
            raise BundleError(f"cannot pack {path}: {problem}")
        return name

    def _add(self, name: str, member: Member, source: Path) -> None:
        if name in self.members:
            return
        self.quotas.check_count(len(self.members) + 1)
        self.members[name] = member
        self.sources[name] = source
        parent = name.rpartition("/")[0]
        if parent:
            self._add(parent, Member("dir", 0o755), self.root / parent)

    def add_file(self, path: Path, st: os.stat_result) -> None:
        name = self.name_of(path)
        self.quotas.check_member(name, st.st_size)
        self.total += st.st_size
        self.quotas.check_total(self.total)
        member = Member("file", normal_mode("file", st.st_mode), _sha256(path), st.st_size)
        self._add(name, member, path)

    def add_link(self, path: Path) -> None:
        name = self.name_of(path)
        target = os.readlink(path)
        real = Path(os.path.realpath(path))
        if os.path.isabs(target) or not real.is_relative_to(self.root):
            raise BundleError(
                f"cannot pack {path}: a symbolic link to {target}, outside the hank folder",
                hint="replace the link with a copy of what it points to",
            )
        self._add(name, Member("symlink", 0o777, target=target), path)

    def add_dir(self, path: Path, rules: tuple[IgnoreRules, ...]) -> None:
        """A referenced folder, walked as a rig copy walks it."""
        name = self.name_of(path)
        self._add(name, Member("dir", 0o755), path)
        nested = path / ".gitignore"
        if nested.is_file() and not nested.is_symlink():
            lines = nested.read_text(errors="replace").splitlines()
            rules = (*rules, IgnoreRules(lines, name))
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            child = Path(entry.path)
            st = entry.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(st.st_mode)
            rel = f"{name}/{entry.name}"
            if _excluded(entry.name) or is_ignored(rules, rel, is_dir):
                continue
            if stat.S_ISLNK(st.st_mode):
                self.add_link(child)
            elif is_dir:
                self.add_dir(child, rules)
            elif stat.S_ISREG(st.st_mode):
                self.add_file(child, st)
            else:
                raise BundleError(f"cannot pack {child}: not a regular file, folder or link")


def _excluded(name: str) -> bool:
    # The names a rig copy never copies (weft.runtime.rig.copy): not bundled either.
    return name in ALWAYS_EXCLUDED or name.startswith(".weft.backup-")


def collect(loaded: LoadedHank, quotas: Quotas | None = None) -> Collected:
    """The members of the bundle of ``loaded``: its hank file, every reference
    the loader checked, the folders above them, and the hank folder's
    ``.gitignore`` when a folder is copied (its rules shape the copy)."""
    root = loaded.directory
    c = _Collector(root, quotas or Quotas())
    hank = c.name_of(loaded.path)
    c.add_file(loaded.path, loaded.path.stat())
    rules = (root_rules(root),)
    folders = False
    for ref in loaded.references:
        st = ref.lstat()
        if stat.S_ISDIR(st.st_mode):
            folders = True
            c.add_dir(ref, rules)
        else:
            c.add_file(ref, st)
    gitignore = root / ".gitignore"
    if folders and gitignore.is_file() and not gitignore.is_symlink():
        c.add_file(gitignore, gitignore.stat())
    for name, member in c.members.items():
        if member.kind != "symlink":
            continue
        problem = symlink_problem(name, c.members)
        target = os.path.relpath(os.path.realpath(root / name), root)
        if problem is None and Path(target).as_posix() not in c.members:
            problem = f"symlink {name} -> {member.target} points to {target}, which is not packed"
        if problem is not None:
            raise BundleError(
                f"cannot pack {root / name}: {problem}",
                hint="replace the link with a copy of what it points to",
            )
    return Collected(hank=hank, members=c.members, sources=c.sources)


def _info(name: str, member: Member) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = member.mode
    if member.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif member.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = member.target
    else:
        info.size = member.size
    return info


def write_bundle(collected: Collected, out: io.RawIOBase | io.BufferedIOBase, version: str) -> str:
    """Writes the bundle of ``collected`` to ``out``: the lock first, then every
    member in name order. Returns the bundle hash. A file that changed since it
    was collected (another size or digest) is refused, not half-packed."""
    lock = encode_lock(collected.hank, collected.members, version)
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL, mtime=0, filename="") as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar,
    ):
        lock_info = _info(LOCK_NAME, Member("file", 0o644, size=len(lock)))
        tar.addfile(lock_info, io.BytesIO(lock))
        for name in sorted(collected.members):
            member = collected.members[name]
            info = _info(name, member)
            if member.kind != "file":
                tar.addfile(info)
                continue
            with collected.sources[name].open("rb") as f:
                reader = _HashingReader(f)
                try:
                    tar.addfile(info, reader)
                except OSError as e:
                    if e.errno is not None:  # the disk, not the file: said as such
                        raise
                    reader.short = True  # tarfile: "unexpected end of data"
                if reader.short or reader.read(1) or reader.digest.hexdigest() != member.sha256:
                    raise BundleError(f"{collected.sources[name]} changed while it was packed")
    return bundle_hash(collected.hank, collected.members)


class _HashingReader:
    """A file read once, hashed as tarfile copies it (a member may be a gigabyte)."""

    def __init__(self, f: io.BufferedReader) -> None:
        self.f = f
        self.digest = hashlib.sha256()
        self.short = False

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.digest.update(data)
        return data


def pack_hank(
    loaded: LoadedHank, output: Path, version: str, quotas: Quotas | None = None
) -> tuple[str, Collected]:
    """Packs ``loaded`` into ``output`` (written whole, then renamed into place, so
    a failed pack leaves no half bundle). Returns the bundle hash and the members."""
    collected = collect(loaded, quotas)
    if LOCK_NAME in collected.members:
        raise BundleError(
            f"the hank references a file named {LOCK_NAME}, the name the bundle's lock takes",
            hint="rename it",
        )
    temp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with temp.open("wb") as f:
            digest = write_bundle(collected, f, version)
        os.replace(temp, output)
    finally:
        temp.unlink(missing_ok=True)
    return digest, collected
