"""Hanks to bundle, and archives built by hand (Python's own tarfile, not Weft's
writer) for the tests that feed the reader what weft pack would never write."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from weft.bundle.lock import Member, encode_lock
from weft.config import LoadedHank, load_hank

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def sample_hank(where: Path) -> Path:
    """A hank with a prompt file, sentinel configs (with their prompts and a schema
    file), a rig copy of a folder (nested .gitignore, an ignored file, an inside
    link, an executable), a copied single file, and files it does not reference."""
    root = where / "hank"
    shutil.copytree(EXAMPLES / "sentinels", root)
    doc = json.loads((root / "hank.json").read_text())
    doc["hank"][0]["rigSetup"] = [
        {"type": "copy", "copy": {"from": "templates/app", "to": "app"}},
        {"type": "copy", "copy": {"from": "config/settings.json", "to": "settings.json"}},
    ]
    (root / "hank.json").write_text(json.dumps(doc, indent=2))
    app = root / "templates" / "app"
    (app / "lib").mkdir(parents=True)
    (app / "main.py").write_text("print('hi')\n")
    (app / "run.sh").write_text("#!/bin/sh\necho run\n")
    (app / "run.sh").chmod(0o755)
    (app / "lib" / "util.py").write_text("X = 1\n")
    (app / "lib" / "debug.log").write_text("ignored by the default rules\n")
    (app / ".gitignore").write_text("*.tmp\n")
    (app / "scratch.tmp").write_text("ignored by the nested .gitignore\n")
    (app / "latest").symlink_to("main.py")
    (app / "empty").mkdir()
    (root / "config").mkdir()
    (root / "config" / "settings.json").write_text('{"mode": "dev"}\n')
    (root / "notes.txt").write_text("not referenced: not bundled\n")
    return root / "hank.json"


def loaded(hank: Path) -> LoadedHank:
    return load_hank(hank, check_environment=False)


@dataclass
class Entry:
    """One member of a hand-built archive."""

    name: str
    data: bytes = b""
    kind: str = "file"
    target: str = ""
    mode: int = 0o644


def tar_bytes(entries: Iterable[Entry], *, compress: bool = True) -> bytes:
    """A PAX tar of ``entries`` in the given order (gzip-compressed by default)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.mode = e.mode
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = e.target
                tar.addfile(info)
            elif e.kind == "hardlink":
                info.type = tarfile.LNKTYPE
                info.linkname = e.target
                tar.addfile(info)
            elif e.kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw


def member_of(e: Entry) -> Member:
    import hashlib

    if e.kind == "dir":
        return Member("dir", e.mode)
    if e.kind == "symlink":
        return Member("symlink", 0o777, target=e.target)
    return Member("file", e.mode, hashlib.sha256(e.data).hexdigest(), len(e.data))


def locked(entries: list[Entry], hank: str = "hank.json") -> list[Entry]:
    """``entries`` preceded by a correct hank.lock for them."""
    members = {e.name: member_of(e) for e in entries}
    return [Entry("hank.lock", encode_lock(hank, members, "test")), *entries]


HANK_DOC = json.dumps(
    {
        "meta": {"name": "tiny", "version": "1.0.0"},
        "hank": [
            {
                "id": "only",
                "name": "Only",
                "model": "fake/sonnet",
                "continuationMode": "fresh",
                "promptFile": "prompt.md",
            }
        ],
    }
).encode()


def tiny() -> list[Entry]:
    """The members of a small valid bundle (lock not included)."""
    return [Entry("hank.json", HANK_DOC), Entry("prompt.md", b"Say hello.\n")]
