"""The pure half of a bundle: member names, the ``hank.lock`` document, quotas and
the comparison of what an archive holds with what its lock says. No I/O here:
:mod:`weft.bundle.pack` and :mod:`weft.bundle.unpack` read and write, and both
call these same rules, so a bundle ``weft pack`` writes is one ``weft run``
accepts, and nothing else is.

The lock (``hank.lock``, canonical JSON, sorted keys)::

    {"lockVersion": 1,
     "bundleHash": "<sha256 of the canonical {hank, members}>",
     "hank": "hank.json",
     "createdBy": {"name": "weft", "version": "0.4.0"},
     "members": {"hank.json": {"type": "file", "sha256": "...", "size": 812, "mode": "0644"},
                 "prompts": {"type": "dir", "mode": "0755"},
                 "seed/latest": {"type": "symlink", "target": "v2"}}}

The bundle hash covers the hank's name and every member (type, digest, size,
mode, link target), not the Weft version or the compression, so the same hank
packed by two Weft versions extracts to the same cache folder.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from weft.bundle.errors import BundleError

__all__ = [
    "LOCK_NAME",
    "LOCK_VERSION",
    "MAX_LOCK_BYTES",
    "Lock",
    "Member",
    "MemberKind",
    "Quotas",
    "bundle_hash",
    "compare",
    "decode_lock",
    "encode_lock",
    "member_name_problem",
    "normal_mode",
    "symlink_problem",
]

LOCK_NAME = "hank.lock"
"""The lock's member name, at the top of the archive (Hankweave's name too)."""

LOCK_VERSION = 1

MAX_LOCK_BYTES = 32 * 1024 * 1024
"""A lock larger than this is refused before it is parsed: 50,000 members at about
200 bytes each is 10 MB, so this leaves room without letting a crafted archive make
the reader hold gigabytes of JSON."""

MemberKind = Literal["file", "dir", "symlink"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MAX_LINK_HOPS = 40
"""Symbolic links followed inside the member table before giving up (the kernel's
own limit), so a cycle of links is an error, not a hang."""


@dataclass(frozen=True, slots=True)
class Quotas:
    """Limits a bundle must keep, packing or reading: Hankweave's figures by default
    (1 GiB a member, 2 GiB in all, 50,000 members)."""

    member_bytes: int = 1 << 30
    total_bytes: int = 2 << 30
    members: int = 50_000

    def check_member(self, name: str, size: int) -> None:
        """Refuses one member over :attr:`member_bytes`."""
        if size > self.member_bytes:
            raise BundleError(
                f"member {name} is {size:,} bytes, over the {self.member_bytes:,}-byte limit "
                "of one bundle member",
                hint="keep large data out of the hank folder: pass it as the data",
            )

    def check_total(self, total: int) -> None:
        """Refuses a bundle whose files add up to over :attr:`total_bytes`."""
        if total > self.total_bytes:
            raise BundleError(
                f"the bundle's files add up to over {self.total_bytes:,} bytes",
                hint="keep large data out of the hank folder: pass it as the data",
            )

    def check_count(self, count: int) -> None:
        """Refuses more than :attr:`members` members."""
        if count > self.members:
            raise BundleError(
                f"the bundle has over {self.members:,} members",
                hint="a hank referencing that many files is probably referencing a data "
                "folder: pass it as the data instead",
            )


@dataclass(frozen=True, slots=True)
class Member:
    """One entry of an archive, or of its lock."""

    kind: MemberKind
    mode: int
    sha256: str = ""
    size: int = 0
    target: str = ""
    """A symlink's target (relative)."""

    def to_json(self) -> dict[str, Any]:
        """The lock's entry for this member."""
        if self.kind == "file":
            out: dict[str, Any] = {"sha256": self.sha256, "size": self.size}
        elif self.kind == "symlink":
            return {"type": "symlink", "target": self.target}
        else:
            out = {}
        return {"type": self.kind, "mode": f"{self.mode:04o}", **out}


def normal_mode(kind: MemberKind, st_mode: int) -> int:
    """The mode a bundle records: ``0755`` for folders and executable files, ``0644``
    for other files. The owner's umask and group bits are this machine's, not the
    hank's; only "can it be executed" travels (as git keeps it)."""
    if kind == "dir" or (kind == "file" and st_mode & 0o100):
        return 0o755
    return 0o644


def member_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a member (``None`` when it can): it must be a
    relative POSIX path inside the bundle, with no ``..``, ``.`` or empty part,
    no backslash, NUL or control character."""
    if not name:
        return "an empty member name"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return f"member name {name!r} contains a control character"
    if "\\" in name:
        return f"member {name!r} uses backslashes"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return f"member {name!r} is an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return f"member {name!r} climbs out of the bundle with '..'"
    if any(part in ("", ".") for part in parts):
        return f"member {name!r} is not a normal path (an empty or '.' part)"
    return None


def symlink_problem(name: str, members: Mapping[str, Member]) -> str | None:
    """Why the symlink member ``name`` would point outside the bundle (``None`` when
    it stays inside), resolved through the member table itself, links included,
    as the kernel would once extracted: ``a -> .`` then ``b -> a/..`` escapes."""
    link = members[name]
    if link.target.startswith("/") or "\\" in link.target or "\x00" in link.target:
        return f"symlink {name} -> {link.target} points outside the bundle"
    path = [*name.split("/")[:-1], *link.target.split("/")]
    where: list[str] = []
    hops = 0
    while path:
        part = path.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not where:
                return f"symlink {name} -> {link.target} points outside the bundle"
            where.pop()
            continue
        here = "/".join([*where, part])
        found = members.get(here)
        if found is not None and found.kind == "symlink":
            hops += 1
            if hops > _MAX_LINK_HOPS:
                return f"symlink {name} -> {link.target} is part of a cycle of links"
            if found.target.startswith("/"):
                return f"symlink {name} -> {link.target} points outside the bundle"
            path = [*found.target.split("/"), *path]
            continue
        where.append(part)
    return None


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def bundle_hash(hank: str, members: Mapping[str, Member]) -> str:
    """The bundle's identity: the sha256 of its hank name and members (sorted)."""
    body = {"hank": hank, "members": {n: m.to_json() for n, m in members.items()}}
    return hashlib.sha256(_canonical(body)).hexdigest()


@dataclass(frozen=True, slots=True)
class Lock:
    """A parsed ``hank.lock``."""

    hank: str
    members: dict[str, Member]
    bundle_hash: str
    created_by: str = ""
    """``weft 0.4.0``, or whichever tool wrote it (shown, never checked)."""
    runtime_min: str | None = None
    """Hankweave's ``runtime.min`` (a Hankweave version): read, not enforced."""


def encode_lock(hank: str, members: Mapping[str, Member], version: str) -> bytes:
    """The canonical bytes of the lock of ``members`` (sorted keys, two-space indent,
    a final newline): the same members always give the same bytes."""
    ordered = {n: members[n] for n in sorted(members)}
    doc = {
        "lockVersion": LOCK_VERSION,
        "bundleHash": bundle_hash(hank, ordered),
        "hank": hank,
        "createdBy": {"name": "weft", "version": version},
        "members": {n: m.to_json() for n, m in ordered.items()},
    }
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def _mode_of(value: Any, where: str) -> int:
    # Weft writes "0644"; a number (Hankweave may write one) is read as it is.
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o7777:
        return value
    if isinstance(value, str) and re.fullmatch(r"0?[0-7]{3,4}", value):
        return int(value, 8)
    raise BundleError(f'hank.lock: {where}: mode {value!r} is not a file mode such as "0644"')


def _member_of(name: str, raw: Any) -> Member:
    if not isinstance(raw, dict):
        raise BundleError(f"hank.lock: members.{name} is not an object")
    kind = raw.get("type", "file")
    if kind == "symlink":
        target = raw.get("target")
        if not isinstance(target, str) or not target:
            raise BundleError(f"hank.lock: members.{name}: a symlink needs a target")
        return Member("symlink", 0o777, target=target)
    if kind == "dir":
        return Member("dir", _mode_of(raw.get("mode", 0o755), f"members.{name}"))
    if kind != "file":
        raise BundleError(f"hank.lock: members.{name}: unknown member type {kind!r}")
    digest = raw.get("sha256")
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise BundleError(f"hank.lock: members.{name}: sha256 is not 64 hex digits")
    size = raw.get("size", -1)
    if not isinstance(size, int) or isinstance(size, bool):
        raise BundleError(f"hank.lock: members.{name}: size is not a whole number")
    return Member("file", _mode_of(raw.get("mode", 0o644), f"members.{name}"), digest, size)


def decode_lock(data: bytes) -> Lock:
    """Parses and checks a lock (Weft's, or Hankweave's where its fields are the
    same); raises :class:`BundleError` saying what is wrong."""
    if len(data) > MAX_LOCK_BYTES:
        raise BundleError(f"hank.lock is over {MAX_LOCK_BYTES:,} bytes")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise BundleError(f"hank.lock is not valid JSON: {e.msg} (line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise BundleError("hank.lock is not a JSON object")
    version = doc.get("lockVersion", LOCK_VERSION)
    if version != LOCK_VERSION:
        raise BundleError(
            f"hank.lock has lockVersion {version!r}; this Weft reads version {LOCK_VERSION}",
            hint="pack the hank again with this Weft (weft pack)",
        )
    raw_members = doc.get("members")
    if not isinstance(raw_members, dict):
        raise BundleError("hank.lock has no members object")
    members: dict[str, Member] = {}
    for name, raw in raw_members.items():
        problem = member_name_problem(name)
        if problem is not None:
            raise BundleError(f"hank.lock lists {problem}")
        members[name] = _member_of(name, raw)
    hank = doc.get("hank", "hank.json")
    if not isinstance(hank, str) or hank not in members or members[hank].kind != "file":
        raise BundleError(f"hank.lock names the hank {hank!r}, which is no file member")
    recorded = doc.get("bundleHash")
    if not isinstance(recorded, str) or not _HEX64.match(recorded):
        raise BundleError("hank.lock has no bundleHash (64 hex digits)")
    created = doc.get("createdBy")
    by = ""
    if isinstance(created, dict):
        by = f"{created.get('name', '?')} {created.get('version', '?')}"
    runtime = doc.get("runtime")
    minimum = runtime.get("min") if isinstance(runtime, dict) else None
    return Lock(
        hank=hank,
        members=members,
        bundle_hash=recorded,
        created_by=by,
        runtime_min=minimum if isinstance(minimum, str) else None,
    )


def compare(lock: Lock, found: Mapping[str, Member], bundle: str) -> None:
    """Refuses an archive whose members are not exactly its lock's: a member
    missing, one more, or one whose type, digest, size or mode differs, and a lock
    whose bundleHash is not its members' (an edited lock). Every difference is
    named, in member order."""
    problems: list[str] = []
    for name in sorted(set(lock.members) | set(found)):
        want, have = lock.members.get(name), found.get(name)
        if have is None:
            problems.append(f"{name}: listed in hank.lock but missing from the archive")
        elif want is None:
            problems.append(f"{name}: in the archive but not listed in hank.lock")
        elif want.kind != have.kind:
            problems.append(f"{name}: a {have.kind} in the archive, a {want.kind} in hank.lock")
        elif want.sha256 != have.sha256:
            problems.append(
                f"{name}: content changed (sha256 {have.sha256[:12]}..., hank.lock says "
                f"{want.sha256[:12]}...)"
            )
        elif want.kind == "file" and want.size != have.size:
            problems.append(f"{name}: {have.size} bytes, hank.lock says {want.size}")
        elif want.kind == "symlink" and want.target != have.target:
            problems.append(f"{name}: links to {have.target}, hank.lock says {want.target}")
        elif want.kind != "symlink" and want.mode != have.mode:
            problems.append(f"{name}: mode {have.mode:04o}, hank.lock says {want.mode:04o}")
    if not problems and bundle_hash(lock.hank, lock.members) != lock.bundle_hash:
        problems.append("hank.lock: its bundleHash is not the hash of its members (edited)")
    if problems:
        shown = problems[:20]
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise BundleError(
            f"{bundle} does not match its hank.lock:\n  " + "\n  ".join(shown) + more,
            hint="the bundle was changed after weft pack made it: pack the hank again",
        )
