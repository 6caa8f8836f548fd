"""Making a fork: a copy of an execution, rolled back to the start of a codon.

See :mod:`weft.fork` for what is copied and why. The source is only read: its
journal through SQLite's backup API (a consistent snapshot even while a run
writes it), its files through copies, its checkpoint objects through git
alternates (the fork's repository reads them where they are; new objects are
the fork's own).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import msgspec

from weft._core import analyze_execution_thread
from weft.agents.claude_transcripts import agent_config_dirs, sanitize_project_dir
from weft.clock import utc_now_iso
from weft.errors import WeftError
from weft.filemodes import private_folder
from weft.portable.export import NOT_CARRIED
from weft.runtime.execution.layout import WORKSPACE, ExecutionLayout
from weft.runtime.execution.meta import ForkedFrom, read_meta, write_meta
from weft.store.execution import DATABASE
from weft.store.journal import backup_journal
from weft.store.lock import pid_alive

__all__ = ["Fork", "ForkError", "fork_name", "make_fork"]

_NOT_COPIED = NOT_CARRIED | {DATABASE}
"""What of ``.weft/`` a fork does not copy: the journal (backed up instead),
the lock and the server's tokens (a fork gets its own). The state document is
copied: opening the fork checks it against the copied journal (and rebuilds
it when they differ, as for a source that was running), which costs less than
a rebuild every time."""


class ForkError(WeftError):
    """The fork cannot be made; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Fork:
    """A fork that was made."""

    path: Path
    source: Path
    codon_id: str


def fork_name(source: Path, codon_id: str) -> Path:
    """A free folder beside ``source``: ``<source>-fork-<codon>[-<n>]``."""
    base = f"{source.name}-fork-{codon_id}"
    candidate = source.parent / base
    n = 2
    while candidate.exists() or candidate.is_symlink():
        candidate = source.parent / f"{base}-{n}"
        n += 1
    return candidate


async def make_fork(source: Path, codon_id: str, dest: Path | None = None) -> Fork:
    """Forks ``source`` at the start of ``codon_id`` into ``dest`` (default:
    :func:`fork_name`). Nothing of ``source`` is written; ``dest`` appears
    whole or not at all."""
    source = source.resolve()
    layout = ExecutionLayout(source)
    if not layout.meta_path.is_file():
        raise ForkError(f"{source} is not a Weft execution (no .weft/execution-meta.json)")
    dest = (dest or fork_name(source, codon_id)).absolute()
    if dest.exists() or dest.is_symlink():
        raise ForkError(f"{dest} already exists: name another folder with --to")
    if dest == source or source in dest.parents:
        raise ForkError(f"{dest} is inside the execution it forks: name a folder outside it")
    before = await _codon_before(source, codon_id)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _sweep_staging(dest)
    staging = dest.with_name(f".{dest.name}.forking-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        private_folder(staging)
        into = ExecutionLayout(staging)
        if before is None:
            _fresh_copy(layout, into)  # the thread's first codon: nothing is inherited
        else:
            _copy_execution(layout, into, final=ExecutionLayout(dest))
        meta = read_meta(into.meta_path)
        meta = msgspec.structs.replace(
            meta, forked_from=ForkedFrom(execution=str(source), codon_id=codon_id, at=utc_now_iso())
        )
        write_meta(into.meta_path, meta)
        if before is not None:
            await _roll_back(staging, before)
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Fork(path=dest, source=source, codon_id=codon_id)


def _sweep_staging(dest: Path) -> None:
    """Removes what forks killed while they were being made left beside
    ``dest`` (hidden ``.<name>.forking-<pid>`` folders whose process is gone)."""
    for left in dest.parent.glob(".*.forking-*"):
        pid = left.name.rsplit("-", 1)[-1]
        if left.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)


async def _codon_before(source: Path, codon_id: str) -> str | None:
    """The codon the thread ran just before ``codon_id`` (None: it is the
    thread's first); :class:`ForkError` when ``codon_id`` is not on the thread.
    Read from the state document (current at every codon boundary), without
    opening the journal: which codon came before does not need it."""
    try:
        state = (source / ".weft" / "state.json").read_bytes()
        codons = analyze_execution_thread(state, validate_checkpoints=False).codons
    except (OSError, WeftError) as e:
        raise ForkError(
            f"the state of {source} cannot be read ({e}): run `weft status` on it"
        ) from e
    for i, record in enumerate(codons):
        if record.codon_id == codon_id:
            return codons[i + 1].codon_id if i + 1 < len(codons) else None
    on_thread = ", ".join(reversed([c.codon_id for c in codons])) or "none"
    raise ForkError(
        f"codon {codon_id!r} is not on the execution thread of {source} (its codons: "
        f"{on_thread}); fork from one of them"
    )


def _fresh_copy(src: ExecutionLayout, dst: ExecutionLayout) -> None:
    """A fork at the thread's first codon: the execution's settings and data,
    no history (its first run starts from the same data as the source's did)."""
    private_folder(dst.weft_dir)
    shutil.copy2(src.meta_path, dst.meta_path)
    dst.workspace.mkdir()
    data = src.workspace / "read_only_data_source"
    if data.is_symlink():
        os.symlink(os.readlink(data), dst.workspace / data.name)
    elif data.is_dir():
        shutil.copytree(data, dst.workspace / data.name, symlinks=True)


def _copy_execution(src: ExecutionLayout, dst: ExecutionLayout, *, final: ExecutionLayout) -> None:
    """Everything the fork needs of ``src`` into ``dst`` (``final``: where it will live)."""
    private_folder(dst.weft_dir)
    backup_journal(src.weft_dir / DATABASE, dst.weft_dir / DATABASE)
    for entry in src.weft_dir.iterdir():
        if entry.name in _NOT_COPIED or entry.name.startswith("."):
            continue
        target = dst.weft_dir / entry.name
        if entry.name == "checkpoints":
            _share_checkpoints(entry, target)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)
    for name in (WORKSPACE, src.rig_archive.name):
        folder = src.root / name
        if folder.is_dir():
            shutil.copytree(folder, dst.root / name, symlinks=True)
    # Claude Code files a session's transcript under its work tree's path: the
    # fork's sessions resume from a folder named after the fork's work tree.
    for config in _claude_configs(src, dst):
        _copy_project(config, src.workspace, final.workspace)


def _share_checkpoints(source: Path, target: Path) -> None:
    """The checkpoint repository's refs and settings, reading the source's objects."""

    def skip_objects(folder: str, names: list[str]) -> list[str]:
        return ["objects"] if Path(folder) == source / ".weftcheckpoints" else []

    shutil.copytree(source, target, symlinks=True, ignore=skip_objects)
    git_dir = target / ".weftcheckpoints"
    if not git_dir.is_dir():
        return
    info = git_dir / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (git_dir / "objects" / "pack").mkdir(exist_ok=True)
    objects = (source / ".weftcheckpoints" / "objects").resolve()
    # The source's own alternates (a fork of a fork) are followed by git itself.
    (info / "alternates").write_text(f"{objects}\n")


def _claude_configs(src: ExecutionLayout, dst: ExecutionLayout) -> list[Path]:
    """Where Claude Code transcripts of ``src`` may be: the fake agents' folder
    in the fork, and the user's Claude config folders."""
    fake = dst.weft_dir / "fake-agents" / "claude"
    return [*([fake] if (fake / "projects").is_dir() else []), *agent_config_dirs(os.environ)]


def _copy_project(config: Path, old_cwd: Path, new_cwd: Path) -> None:
    old = config / "projects" / sanitize_project_dir(old_cwd)
    if not old.is_dir():
        return
    new = config / "projects" / sanitize_project_dir(new_cwd)
    shutil.copytree(old, new, symlinks=True, dirs_exist_ok=True)


async def _roll_back(execution: Path, before: str) -> None:
    """The fork's history ends where the forked codon started, at the end of
    ``before`` (the codon the thread ran just before it): the rollback every
    execution has (covered files restored, rig copies of later codons removed,
    archives brought back), whose run records where the fork continues."""
    from weft.cli.thread import rollback_offline

    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        await rollback_offline(execution, before, end="end", discard=True)
