"""Using a bundle: read it once as a stream, check every member against its lock,
and extract it to a private cache folder named by its bundle hash.

:func:`open_bundle` is the whole job. What it guarantees, whatever the archive
holds (the tests fuzz it):

* **Nothing is written outside the cache.** Members are extracted into a fresh
  folder inside ``<cache>/weft/bundles/`` (``0700``, :func:`weft.filemodes.private_folder`)
  by Weft's own code, not ``tarfile.extract``: every name is checked first
  (:func:`weft.bundle.lock.member_name_problem`: no absolute path, no ``..``),
  every folder on the way is made by this code (so none is a link), files are
  created with ``O_EXCL | O_NOFOLLOW``, and symbolic links, once checked to
  resolve inside the bundle through the member table, are made last, after
  every file is written.
* **Nothing unverified is used.** The folder is renamed to ``<bundleHash>``
  only once every member matched the lock (:func:`weft.bundle.lock.compare`);
  any problem removes the half-made folder and raises :class:`BundleError`.
  A cached folder is used again only if it still matches the lock.
* **Bounded.** Quotas on members, bytes per member and in all, and on the
  decompressed stream itself (a compression bomb stops at the limit).

Compression is read from the first bytes: gzip (what ``weft pack`` writes),
zstd (Hankweave's; needs the optional ``zstandard`` package), or a plain tar.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from weft.bundle.errors import BundleError
from weft.bundle.lock import (
    LOCK_NAME,
    MAX_LOCK_BYTES,
    Lock,
    Member,
    Quotas,
    compare,
    decode_lock,
    member_name_problem,
    symlink_problem,
)
from weft.filemodes import private_folder
from weft.store.diskspace import STORAGE_ERRNOS

__all__ = ["BUNDLE_SUFFIXES", "OpenedBundle", "bundle_cache", "is_bundle_name", "open_bundle"]

BUNDLE_SUFFIXES = (".hank", ".tar.zst", ".hank.tgz")
"""Names taken for a bundle where a hank is expected (``.hank`` and ``.tar.zst`` as
Hankweave takes them)."""

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_HEADER_ALLOWANCE = 8192
"""Bytes of tar headers (PAX records included) allowed per member in the
decompressed stream, on top of the members' contents."""
_CHUNK = 1 << 20
_UNREADABLE = "not a readable bundle (truncated, or not a tar archive)"


def is_bundle_name(arg: str) -> bool:
    """Whether ``arg`` names a bundle by its suffix."""
    return arg.endswith(BUNDLE_SUFFIXES)


def bundle_cache() -> Path:
    """``$XDG_CACHE_HOME/weft/bundles`` (``~/.cache/weft/bundles``)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "weft" / "bundles"


@dataclass(frozen=True, slots=True)
class OpenedBundle:
    """A verified bundle, extracted."""

    folder: Path
    """``<cache>/<bundleHash>``: the hank's folder."""
    hank_file: Path
    lock: Lock


class _Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Limited:
    """A decompressed stream that refuses to give more than ``limit`` bytes."""

    def __init__(self, raw: _Readable, limit: int, bundle: str) -> None:
        self.raw, self.left, self.bundle = raw, limit, bundle

    def read(self, n: int = -1) -> bytes:
        want = self.left + 1 if n < 0 else min(n, self.left + 1)
        data = self.raw.read(want)
        self.left -= len(data)
        if self.left < 0:
            raise BundleError(f"{self.bundle}: decompresses to more than its quotas allow")
        return data


@contextlib.contextmanager
def _decompressed(path: Path, shown: str, limit: int) -> Iterator[_Limited]:
    with path.open("rb") as raw:
        head = raw.read(4)
        raw.seek(0)
        if head.startswith(_GZIP_MAGIC):
            import gzip

            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                yield _Limited(gz, limit, shown)
        elif head == _ZSTD_MAGIC:
            try:
                import zstandard  # type: ignore[import-not-found]  # optional: Hankweave's bundles
            except ImportError:
                raise BundleError(
                    f"{shown} is zstd-compressed (a Hankweave bundle)",
                    hint="pip install zstandard to read it, or pack the hank with weft pack",
                ) from None
            with zstandard.ZstdDecompressor().stream_reader(raw) as zs:
                yield _Limited(zs, limit, shown)
        else:
            yield _Limited(raw, limit, shown)


def _kind(info: tarfile.TarInfo) -> str | None:
    if info.issym():
        return "symlink"
    if info.isdir():
        return "dir"
    if info.isreg() and not info.issparse():
        return "file"
    return None


class _Extractor:
    """Writes one archive's members into ``into`` (a fresh folder), checking each."""

    def __init__(self, into: Path, shown: str, quotas: Quotas) -> None:
        self.into, self.shown, self.quotas = into, shown, quotas
        self.found: dict[str, Member] = {}
        self.lock_bytes: bytes | None = None
        self.total = 0
        self.count = 0
        self.implied: set[str] = set()
        self.lock: Lock | None = None
        """Folders made for a member inside them that had no entry of their own."""

    def refuse(self, what: str) -> BundleError:
        return BundleError(
            f"{self.shown}: {what}",
            hint="the archive is damaged or was not made by weft pack: do not use it",
        )

    def member(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        name = info.name[2:] if info.name.startswith("./") else info.name
        name = name.rstrip("/") if info.isdir() else name
        if info.isdir() and name in ("", "."):
            return  # the archive's own root, as some tar writers add it
        problem = member_name_problem(name)
        if problem is not None:
            raise self.refuse(problem)
        kind = _kind(info)
        if kind is None:
            raise self.refuse(
                f"member {name} is a hard link, device or FIFO; bundles hold files, folders "
                "and symbolic links only"
            )
        if name == LOCK_NAME:
            if kind != "file" or self.lock_bytes is not None:
                raise self.refuse(f"{LOCK_NAME} is not one regular file")
            if info.size > MAX_LOCK_BYTES:
                raise self.refuse(f"{LOCK_NAME} is over {MAX_LOCK_BYTES:,} bytes")
            f = tar.extractfile(info)
            assert f is not None  # a regular member always has a file
            self.lock_bytes = f.read()
            # Read first (as weft pack writes it), the lock refuses early: a member it
            # does not list is never written, nor a lock listing more than the quota.
            self.lock = decode_lock(self.lock_bytes)
            self.quotas.check_count(len(self.lock.members))
            unlisted = sorted(set(self.found) - set(self.lock.members) - self.implied)
            if unlisted:
                raise self._unlisted(unlisted[0])
            return
        if self.lock is not None and name not in self.lock.members:
            raise self._unlisted(name)
        self.count += 1
        self.quotas.check_count(self.count)
        if name in self.implied and kind == "dir":
            self.implied.discard(name)  # its entry after its contents: the mode it gives
            self.found[name] = Member("dir", stat.S_IMODE(info.mode))
            return
        if name in self.found:
            raise self.refuse(f"member {name} appears twice")
        parts = name.split("/")
        for i in range(1, len(parts)):
            above = self.found.get("/".join(parts[:i]))
            if above is not None and above.kind != "dir":
                raise self.refuse(f"member {name} is inside {above.kind} {'/'.join(parts[:i])}")
        self._make_parents(parts[:-1])
        if kind == "symlink":
            self.found[name] = Member("symlink", 0o777, target=info.linkname)
            return
        target = self.into.joinpath(*parts)
        if kind == "dir":
            self._mkdir(target, name)
            self.found[name] = Member("dir", stat.S_IMODE(info.mode))
            return
        self.quotas.check_member(name, info.size)
        self.total += info.size
        self.quotas.check_total(self.total)
        self.found[name] = self._write(tar, info, target, name)

    def _unlisted(self, name: str) -> BundleError:
        return BundleError(
            f"{self.shown} does not match its hank.lock:\n  {name}: in the archive but not "
            "listed in hank.lock",
            hint="the bundle was changed after weft pack made it: pack the hank again",
        )

    def _make_parents(self, parts: list[str]) -> None:
        for i in range(1, len(parts) + 1):
            folder = "/".join(parts[:i])
            if folder not in self.found:
                self.found[folder] = Member("dir", 0o755)
                self.implied.add(folder)
                self._mkdir(self.into.joinpath(*parts[:i]), folder)

    def _mkdir(self, target: Path, name: str) -> None:
        try:
            os.mkdir(target, 0o700)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(target).st_mode):
                raise self.refuse(f"member {name} is both a file and a folder") from None

    def _write(
        self, tar: tarfile.TarFile, info: tarfile.TarInfo, target: Path, name: str
    ) -> Member:
        source = tar.extractfile(info)
        assert source is not None  # a regular member always has a file
        digest = hashlib.sha256()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(target, flags, 0o600)
        except FileExistsError:
            raise self.refuse(f"member {name} appears twice") from None
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        return Member("file", stat.S_IMODE(info.mode), digest.hexdigest(), info.size)

    def finish(self) -> Lock:
        """Checks the whole against the lock; then makes the links and sets the modes."""
        if self.lock_bytes is None:
            raise self.refuse(f"no {LOCK_NAME}: not a bundle made by weft pack")
        lock = self.lock or decode_lock(self.lock_bytes)
        # A folder only implied by its members (no entry of its own, as some tar
        # writers do) is no extra member; listed in the lock, it takes the lock's mode.
        found: dict[str, Member] = {}
        for name, member in self.found.items():
            if name not in self.implied:
                found[name] = member
            elif name in lock.members:
                listed = lock.members[name]
                found[name] = listed if listed.kind == "dir" else member
        compare(lock, found, self.shown)
        for name, member in sorted(found.items()):
            if member.kind != "symlink":
                continue
            problem = symlink_problem(name, found)
            if problem is not None:
                raise self.refuse(problem)
        for name, member in sorted(found.items()):
            path = self.into.joinpath(*name.split("/"))
            if member.kind == "symlink":
                os.symlink(member.target, path)
            elif member.kind == "file":
                os.chmod(path, member.mode & 0o777)
        # Folders last and deepest first; the owner keeps rwx so the cache can be cleaned.
        for name, member in sorted(found.items(), reverse=True):
            if member.kind == "dir":
                os.chmod(self.into.joinpath(*name.split("/")), (member.mode & 0o777) | 0o700)
        (self.into / LOCK_NAME).write_bytes(self.lock_bytes)
        return lock


def _read_into(path: Path, shown: str, into: Path, quotas: Quotas) -> Lock:
    limit = quotas.total_bytes + (quotas.members + 2) * _HEADER_ALLOWANCE + MAX_LOCK_BYTES
    ex = _Extractor(into, shown, quotas)
    try:
        with (
            _decompressed(path, shown, limit) as stream,
            tarfile.open(fileobj=stream, mode="r|", encoding="utf-8") as tar,  # type: ignore[call-overload]
        ):
            for info in tar:
                ex.member(tar, info)
        return ex.finish()
    except BundleError:
        raise
    except OSError as e:
        if e.errno in STORAGE_ERRNOS:
            raise  # the disk, not the bundle: the CLI says so (exit 1)
        if e.errno is None:  # gzip's and tarfile's own refusals
            raise ex.refuse(
                f"not a readable bundle (truncated, or not a tar archive): {e}"
            ) from None
        # A name too long for this file system, a bundle this user may not read, ...
        where = e.filename if e.filename else path
        raise BundleError(f"{shown}: {e.strerror}: {where}") from None
    except (tarfile.TarError, EOFError, zlib.error, UnicodeError, ValueError) as e:
        why = str(e) or type(e).__name__
        raise ex.refuse(f"{_UNREADABLE}: {why}") from None


def _matches(folder: Path, lock: Lock) -> bool:
    """Whether a cached folder still holds exactly the lock's members."""
    seen: set[str] = set()
    try:
        for dirpath, dirnames, filenames in os.walk(folder):
            rel = Path(dirpath).relative_to(folder).as_posix()
            for entry in [*dirnames, *filenames]:
                name = entry if rel == "." else f"{rel}/{entry}"
                if name != LOCK_NAME:
                    seen.add(name)
        if seen != set(lock.members):
            return False
        for name, member in lock.members.items():
            path = folder / name
            st = path.lstat()
            if member.kind == "symlink":
                if not stat.S_ISLNK(st.st_mode) or os.readlink(path) != member.target:
                    return False
            elif member.kind == "dir":
                if not stat.S_ISDIR(st.st_mode):
                    return False
            elif not stat.S_ISREG(st.st_mode) or st.st_size != member.size:
                return False
            else:
                digest = hashlib.sha256()
                with path.open("rb") as f:
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
                if digest.hexdigest() != member.sha256:
                    return False
    except OSError:
        return False
    return True


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def open_bundle(
    path: Path, *, cache: Path | None = None, quotas: Quotas | None = None, shown: str = ""
) -> OpenedBundle:
    """Verifies the bundle at ``path`` and returns its extracted folder under
    ``cache`` (default :func:`bundle_cache`). Raises :class:`BundleError`."""
    shown = shown or str(path)
    if not path.is_file():
        raise BundleError(
            f"{shown}: no such bundle" if not path.exists() else f"{shown}: not a file"
        )
    where = cache or bundle_cache()
    incoming = where / f".incoming-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        root = private_folder(where)
        private_folder(incoming)
    except OSError as e:
        if e.errno in STORAGE_ERRNOS:
            raise
        raise BundleError(
            f"{shown}: cannot make the bundle cache {where}: {e.strerror}",
            hint="set XDG_CACHE_HOME to a folder you can write",
        ) from None
    try:
        try:
            lock = _read_into(path, shown, incoming, quotas or Quotas())
        except BundleError as e:
            if e.message.startswith(shown):
                raise
            # The lock's and the quotas' rules do not know the file: say it first.
            raise BundleError(f"{shown}: {e.message}", hint=e.hint) from None
        final = root / lock.bundle_hash
        if final.exists() and not _matches(final, lock):
            stale = root / f".stale-{os.getpid()}-{secrets.token_hex(4)}"
            with contextlib.suppress(FileNotFoundError):
                final.rename(stale)
            _remove(stale)
        try:
            incoming.rename(final)
        except OSError:
            # Another process put the same bundle there meanwhile: use it if it is whole.
            if not _matches(final, lock):
                raise BundleError(f"{shown}: cannot extract it to {final}") from None
    finally:
        _remove(incoming)
    os.chmod(final, 0o700)
    return OpenedBundle(folder=final, hank_file=final / lock.hank, lock=lock)
