"""``weft import``: an execution archive restored into a folder (see :mod:`weft.portable`).

Every member is checked (:func:`weft.portable.members.member_problem`) and its
bytes against the manifest's sha256 before the import is kept; extraction uses
the standard library's ``data`` filter as a second guard. The execution is
made in a hidden folder beside the destination and renamed into place, so a
failed or killed import leaves nothing half made.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

import msgspec

from weft.agents.claude_transcripts import sanitize_project_dir
from weft.filemodes import private_folder
from weft.portable.export import FORMAT, ArchiveError
from weft.portable.members import MANIFEST, MAX_MEMBERS, Kind, member_problem
from weft.runtime.execution.layout import ExecutionLayout
from weft.runtime.execution.meta import read_meta, write_meta

__all__ = ["IMPORTED_HANK", "import_archive", "planned_name"]

IMPORTED_HANK = "imported-hank"
"""Where the archive's hank lands, under the execution's ``.weft/``."""


def _kind(member: tarfile.TarInfo) -> Kind:
    if member.isfile():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    return "other"


def _open(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, "r:gz")
    except FileNotFoundError:
        raise ArchiveError(f"{archive}: no such file") from None
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ArchiveError(f"{archive} is not a Weft execution archive ({e})") from None


def _manifest(tar: tarfile.TarFile, archive: Path) -> dict[str, Any]:
    try:
        member = tar.getmember(MANIFEST)
        raw = tar.extractfile(member)
        data: Any = json.loads(raw.read(16 << 20)) if raw is not None else None
    except KeyError:
        raise ArchiveError(f"{archive} has no {MANIFEST}: not a Weft execution archive") from None
    except (ValueError, tarfile.TarError, OSError, EOFError) as e:
        raise ArchiveError(f"{archive}: its {MANIFEST} cannot be read ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("members"), dict):
        raise ArchiveError(f"{archive}: its {MANIFEST} is not a manifest")
    if data.get("format") != FORMAT:
        raise ArchiveError(
            f"{archive} is format {data.get('format')!r}; this Weft reads format {FORMAT}: "
            "import it with the Weft that exported it"
        )
    execution = data.get("execution")
    if not isinstance(execution, str) or member_problem(f"weft/{execution}", "dir"):
        raise ArchiveError(f"{archive}: its manifest names no valid execution")
    return data


def planned_name(archive: Path) -> str:
    """The execution's own name, as the archive's manifest has it."""
    with _open(archive) as tar:
        return str(_manifest(tar, archive)["execution"])


def import_archive(archive: Path, dest: Path) -> Path:
    """Restores ``archive`` as the execution folder ``dest`` (which must not exist)."""
    dest = dest.absolute()
    if dest.exists() or dest.is_symlink():
        raise ArchiveError(f"{dest} already exists: import into another folder (--to)")
    with _open(archive) as tar:
        manifest = _manifest(tar, archive)
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ArchiveError(f"{archive} is damaged ({e})") from None
        if len(members) > MAX_MEMBERS:
            raise ArchiveError(
                f"{archive} holds {len(members):,} members (at most {MAX_MEMBERS:,})"
            )
        for member in members:
            problem = member_problem(member.name, _kind(member), member.linkname or None)
            if problem is not None:
                raise ArchiveError(f"{archive}: refused: {problem}")
        listed = manifest["members"]
        files = {m.name for m in members if m.isfile() and m.name != MANIFEST}
        if set(listed) != files:
            extra = sorted(files - set(listed))[:3]
            missing = sorted(set(listed) - files)[:3]
            raise ArchiveError(
                f"{archive} does not match its manifest (not listed: {extra}; missing: {missing})"
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = dest.with_name(f".{dest.name}.importing-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            private_folder(staging)
            _extract(tar, members, staging, listed, archive)
            _settle(staging, dest, manifest)
            os.rename(staging, dest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return dest


def _extract(
    tar: tarfile.TarFile,
    members: list[tarfile.TarInfo],
    staging: Path,
    listed: dict[str, str],
    archive: Path,
) -> None:
    for member in members:
        if member.name == MANIFEST:
            continue
        target = staging / member.name
        if member.isfile():
            source = tar.extractfile(member)
            if source is None:
                raise ArchiveError(f"{archive}: {member.name} cannot be read")
            target.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            with target.open("wb") as out:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != listed[member.name]:
                raise ArchiveError(f"{archive}: {member.name} does not match its checksum")
            os.chmod(target, member.mode & 0o755 or 0o600)
        else:
            tar.extract(member, staging, filter="data")


def _settle(staging: Path, dest: Path, manifest: dict[str, Any]) -> None:
    """The archive's folders in the execution's own places."""
    os.rename(staging / "weft", staging / ".weft")
    layout, final = ExecutionLayout(staging), ExecutionLayout(dest)
    private_folder(layout.weft_dir)
    hank = staging / "hank"
    meta = read_meta(layout.meta_path)
    if hank.is_dir():
        os.rename(hank, layout.weft_dir / IMPORTED_HANK)
        name = str(manifest.get("hankFile") or "hank.json")
        meta = msgspec.structs.replace(
            meta, hank_path=str(final.weft_dir / IMPORTED_HANK / Path(name).name)
        )
    write_meta(layout.meta_path, meta)
    projects = staging / "claude-projects"
    if projects.is_dir():
        # Filed where a resumed Claude Code looks for them: under the new work tree's name.
        target = layout.weft_dir / "fake-agents" / "claude" / "projects"
        config = os.environ.get("WEFT_CLAUDE_CONFIG_DIR") or os.environ.get("CLAUDE_CONFIG_DIR")
        for folder in projects.iterdir():
            new_name = sanitize_project_dir(final.workspace)
            if config:
                shutil.copytree(folder, Path(config) / "projects" / new_name, dirs_exist_ok=True)
            target.mkdir(parents=True, exist_ok=True)
            shutil.copytree(folder, target / new_name, dirs_exist_ok=True)
        shutil.rmtree(projects)
    fake = layout.weft_dir / "fake-agents" / "claude" / "projects"
    old = str(manifest.get("workspace") or "")
    if (
        old
        and (fake / old).is_dir()
        and not (fake / sanitize_project_dir(final.workspace)).exists()
    ):
        os.rename(fake / old, fake / sanitize_project_dir(final.workspace))
