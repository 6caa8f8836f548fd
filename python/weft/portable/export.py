"""``weft export``: an execution as one archive (see :mod:`weft.portable`).

The source is only read. Its journal is copied with SQLite's backup API into a
temporary file first (a consistent snapshot even while a run appends), then
every member goes into a gzip'd tar whose manifest lists each one's sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weft import __version__
from weft.agents.claude_transcripts import agent_config_dirs, sanitize_project_dir
from weft.errors import WeftError
from weft.portable.members import MANIFEST
from weft.runtime.execution.layout import ExecutionLayout
from weft.runtime.execution.meta import read_meta
from weft.store.execution import DATABASE
from weft.store.journal import backup_journal

__all__ = ["FORMAT", "NOT_CARRIED", "ArchiveError", "Exported", "export_execution"]

FORMAT = 1
"""The archive format this Weft writes and reads."""

NOT_CARRIED = frozenset(
    {
        f"{DATABASE}-wal",
        f"{DATABASE}-shm",
        "runtime.lock",
        "runtime.lock.guard",
        "server.token",
        "server-read.token",
    }
)
"""Not carried: the live journal's side files (the backup is whole), the lock
and the server's tokens (secrets of this machine; the importer makes its own)."""


class ArchiveError(WeftError):
    """An archive cannot be made or read; the message says why."""


@dataclass(frozen=True, slots=True)
class Exported:
    """What was written."""

    path: Path
    members: int
    bytes: int


def export_execution(execution: Path, out: Path) -> Exported:
    """Writes ``execution`` to the archive ``out`` (replaced atomically)."""
    layout = ExecutionLayout(execution.resolve())
    if not layout.meta_path.is_file():
        raise ArchiveError(f"{execution} is not a Weft execution (no .weft/execution-meta.json)")
    meta = read_meta(layout.meta_path)
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".weft-export-", dir=out.parent) as tmp:
        journal = Path(tmp) / DATABASE
        backup_journal(layout.weft_dir / DATABASE, journal)
        members = list(_members(layout, journal, Path(meta.hank_path)))
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "weftVersion": __version__,
            "execution": layout.execution_id,
            "source": str(layout.root),
            "hankFile": Path(meta.hank_path).name,
            "workspace": sanitize_project_dir(layout.workspace),
            "members": {},
        }
        partial = Path(tmp) / "archive.tmp"
        with tarfile.open(partial, "w:gz", compresslevel=1, format=tarfile.PAX_FORMAT) as tar:
            for name, path in members:
                info = tar.gettarinfo(str(path), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isfile():
                    with path.open("rb") as f:
                        digest = hashlib.sha256()
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            digest.update(chunk)
                        manifest["members"][name] = digest.hexdigest()
                        f.seek(0)
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
            data = json.dumps(manifest, indent=1, sort_keys=True).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(data)
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
        os.replace(partial, out)
    return Exported(path=out, members=len(members), bytes=out.stat().st_size)


def _walk(root: Path, top: str) -> Iterator[tuple[str, Path]]:
    """``(archive name, path)`` of ``root`` and everything under it (links not followed)."""
    yield top, root
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        base = Path(folder)
        rel = base.relative_to(root)
        for name in sorted(dirs + files):
            path = base / name
            yield f"{top}/{(rel / name).as_posix()}" if str(rel) != "." else f"{top}/{name}", path


def _members(layout: ExecutionLayout, journal: Path, hank: Path) -> Iterator[tuple[str, Path]]:
    yield "weft", layout.weft_dir
    yield f"weft/{DATABASE}", journal
    git_dir = layout.checkpoints
    for entry in sorted(layout.weft_dir.iterdir()):
        if entry.name in NOT_CARRIED or entry.name == DATABASE:
            continue
        if entry.name == "checkpoints":
            yield from _checkpoints(entry, git_dir)
        elif entry.is_dir() and not entry.is_symlink():
            yield from _walk(entry, f"weft/{entry.name}")
        else:
            yield f"weft/{entry.name}", entry
    for top, folder in (("agentRoot", layout.workspace), ("rigArchive", layout.rig_archive)):
        if folder.is_dir():
            yield from _walk(folder, top)
    yield from _hank_files(hank)
    for config in agent_config_dirs(os.environ):
        project = config / "projects" / sanitize_project_dir(layout.workspace)
        if project.is_dir():
            yield "claude-projects", project.parent
            yield from _walk(project, f"claude-projects/{project.name}")
            break


def _checkpoints(folder: Path, git_dir: Path) -> Iterator[tuple[str, Path]]:
    """The checkpoint repository, self-contained: a fork's objects read through
    git alternates (its source's) are carried as the fork's own."""
    alternates = git_dir / "objects" / "info" / "alternates"
    for name, path in _walk(folder, "weft/checkpoints"):
        if path != alternates:
            yield name, path
    if not alternates.is_file():
        return
    seen: set[Path] = set()
    pending = [Path(line) for line in alternates.read_text().split() if line]
    objects = f"weft/checkpoints/{git_dir.name}/objects"
    while pending:
        other = pending.pop().resolve()
        if other in seen or not other.is_dir():
            continue
        seen.add(other)
        more = other / "info" / "alternates"
        if more.is_file():
            pending += [Path(line) for line in more.read_text().split() if line]
        for name, path in _walk(other, objects):
            if path.is_file() and "/info/" not in name:
                yield name, path


def _hank_files(hank: Path) -> Iterator[tuple[str, Path]]:
    """The hank file and every file of its folder that it (or a sentinel config
    it names) refers to by a relative path."""
    folder = hank.parent
    yield "hank", folder
    wanted: dict[str, Path] = {hank.name: hank}
    pending = [hank]
    while pending:
        doc = pending.pop()
        try:
            data = json.loads(doc.read_bytes())
        except (OSError, ValueError):
            continue
        for text in _strings(data):
            if not text or len(text) > 4096 or "\x00" in text:
                continue
            path = (folder / text).resolve() if not os.path.isabs(text) else None
            if path is None or not path.is_file() or folder.resolve() not in path.parents:
                continue
            rel = path.relative_to(folder.resolve()).as_posix()
            if rel not in wanted:
                wanted[rel] = path
                if path.suffix == ".json":
                    pending.append(path)
    parents: set[str] = set()
    for rel in wanted:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parents.add("/".join(parts[:i]))
    for rel in sorted(parents):
        yield f"hank/{rel}", folder / rel
    for rel, path in sorted(wanted.items()):
        yield f"hank/{rel}", path


def _strings(data: Any) -> Iterator[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, list):
        for item in data:
            yield from _strings(item)
    elif isinstance(data, dict):
        for value in data.values():
            yield from _strings(value)
