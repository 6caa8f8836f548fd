"""The shadow repository's operations: snapshot, restore, list, verify, resolve.

The git index is the workspace's stat cache: it always holds exactly the
tree of the last checkpoint taken or restored here (HEAD, detached), with the
size, times and inode each file had then. A snapshot asks libgit2 which files
differ from the index (only the paths the inotify watcher saw change, when it
can vouch for them; otherwise every covered path), hashes just those, builds
the few trees on their paths in memory, writes the new objects as one pack and
commits with an explicit parent. Unchanged files are never read.

The repository that owns the run (``writer``: it holds the runtime lock)
appends each checkpoint's objects and branch move to the checkpoint log
(:mod:`weft.checkpoints.pending`) and moves them into git every
:data:`FLUSH_EVERY` checkpoints, before any other operation, and when it
closes: one write per checkpoint instead of three file creations. Opening
replays what a crash left in the log. A read-only opener (beside a live run)
writes straight into git and sees the log's branch tips.

All public methods are serialised by one lock; blocking callers in async code
should use :class:`weft.checkpoints.aio.AsyncCheckpointRepo`.

Why over 600 lines: it is one class, :class:`CheckpointRepo`, whose
operations share one lock, one index (the stat cache) and one object store;
split across modules they would share that state through private attributes,
and the lock's invariant (every public method holds it) would no longer be
visible in one place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pygit2
from pygit2.enums import RepositoryOpenFlag, SortMode

from weft.checkpoints.errors import (
    AmbiguousCheckpointError,
    CheckpointConflictError,
    CheckpointError,
    CheckpointNotFoundError,
    CheckpointStorageError,
)
from weft.checkpoints.gitindex import StatIndex
from weft.checkpoints.messages import (
    AUTHOR_EMAIL,
    AUTHOR_NAME,
    CHECKPOINT_TYPES,
    Checkpoint,
    format_message,
    format_recovery_message,
    parse_message,
)
from weft.checkpoints.packs import (
    CONSOLIDATE_OVER,
    OBJ_COMMIT,
    consolidate_packs,
    object_id,
    small_packs,
    write_pack,
)
from weft.checkpoints.patterns import PatternSet, is_excluded
from weft.checkpoints.pending import LOG_NAME, CheckpointLog, Obj, read_log
from weft.checkpoints.scan import Scan, WorkspaceScanner
from weft.checkpoints.storage import (
    MAIN_BRANCH,
    git_environment,
    open_storage,
)
from weft.checkpoints.trees import (
    MODE_EXEC,
    MODE_LINK,
    Entry,
    TreeEditor,
    TreeError,
)
from weft.checkpoints.watch import ChangeWatcher
from weft.checkpoints.worktree import remove_files, write_file
from weft.clock import utc_now_iso

log = logging.getLogger(__name__)

#: The index is written back after this many snapshots, or sooner after many changes.
#: A save costs 2.5-5 ms of mostly file creations and renames (the pack, its
#: index, HEAD, the branch, the index), which a checkpoint right behind it waits
#: for: the loop idled 0.05-0.09 ms a codon in its checkpoints with a save every
#: 64, 0.185 ms with one every 16 (2,000-codon runs, 2026-11-27).
INDEX_WRITE_EVERY = 64
INDEX_WRITE_CHANGES = 512
#: The checkpoint log is moved into git after this many checkpoints, or sooner
#: once its objects hold :data:`FLUSH_BYTES` or its oldest checkpoint is
#: :data:`FLUSH_AFTER` seconds old; the index is written at the same moments
#: (HEAD may only name a commit git has).
FLUSH_EVERY = INDEX_WRITE_EVERY
FLUSH_BYTES = 4 << 20
#: Seconds a checkpoint may wait in the log while checkpoints keep coming (an
#: idle run's log is moved after a quiet second anyway): git's own files, which
#: the git CLI reads, lag the run by at most this much.
FLUSH_AFTER = 2.0
#: How many commits made or checked here are remembered as existing.
KNOWN_COMMITS = 256
#: :meth:`CheckpointRepo.maintain` merges packs while checkpoints keep coming
#: only once this many wait (a run whose codons take no time at all).
MAINTAIN_ANYWAY = 256
#: A checkpoint whose new objects are larger than this goes to git at once, as
#: a pack of its own, and only its branch move is logged.
LOG_OBJECTS_MAX = 1 << 20
#: :meth:`CheckpointRepo.snapshot_now` takes a checkpoint on the caller's thread
#: only when the watcher names at most this many changed paths...
QUICK_PATHS = 32
#: ... files all, together at most this many bytes: it then costs a few hundred
#: microseconds at most (a few ms for a megabyte), less than handing it to
#: another thread and back.
QUICK_BYTES = 1 << 20

_HEX = re.compile(r"[0-9a-f]{4,40}")
_FULL_HEX = re.compile(r"[0-9a-f]{40}")


# Aliases: inside CheckpointRepo, ``list`` names the method.
_Paths = list[str]
_Checkpoints = list[Checkpoint]
_Found = list[tuple[int, int, Checkpoint]]
_Objects = list[Obj]


def run_branch(run_id: str) -> str:
    """The history branch of a run: ``run-<runId>``."""
    return f"run-{run_id}"


@dataclass
class RestoreResult:
    """What a restore changed in the workspace."""

    sha: str
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RecoverySnapshot:
    """A work tree saved to its own ``recovery/...`` branch."""

    branch: str
    sha: str


class CheckpointRepo:
    """A shadow git repository whose work tree is the agent's workspace."""

    def __init__(
        self,
        git_dir: Path,
        workspace: Path,
        repo: pygit2.Repository,
        *,
        initial_sha: str,
        repairs: list[str],
        created: bool,
        watch: bool,
        writer: bool = True,
    ) -> None:
        self.git_dir = git_dir
        self.workspace = workspace
        #: What opening had to repair, sweep or rebuild, for the runtime to report.
        self.repairs = repairs
        #: Whether the repository was created (or rebuilt) by this open.
        self.created = created
        #: The initial empty commit on ``main``.
        self.initial_sha = initial_sha
        self._repo = repo
        self._root = os.fsdecode(workspace)
        self._pack_dir = git_dir / "objects" / "pack"
        self._lock = threading.RLock()
        self._writer = writer
        """Whether this opener owns the repository (a run's); others beside a
        live run write commits, packs and branches, never its index or HEAD."""
        self._log: CheckpointLog | None = None
        self._overlay: dict[str, str] = {}
        """A read-only opener's view of the branch moves still in the log."""
        self._logged_head: str | None = None
        """A read-only opener's view of the owner's HEAD while the log holds checkpoints."""
        self._disk_tips: dict[str, str | None] = {}
        """Branch tips read from git (the writer's cache: no one else moves them)."""
        pending = self._replay(writer)
        self._editor = TreeEditor(repo, pending)
        self._patterns: dict[tuple[str, ...], PatternSet] = {}
        self._synced: PatternSet | None = None
        self._snapshots_unsaved = 0
        self._changes_unsaved = 0
        self._moved_objects: set[bytes] = set()
        """Objects of the log already put into git by a move whose HEAD save failed."""
        self._retry_move_at: tuple[int, int] | None = None
        """After HEAD could not be saved (a git command held its lock): the log's
        records and bytes at which its move into git is tried again."""
        self._head_unsaved = False
        self._packs_unmerged = len(small_packs(self._pack_dir))
        self._last_snapshot = 0.0
        """When the last snapshot ended (``time.monotonic``), for :meth:`maintain`."""
        self._closed = False
        index = self._load_index()
        self._stat = StatIndex(repo, index, self._root, owned=writer)
        head = repo.head.peel(pygit2.Commit)
        try:
            lags = len(head.tree.diff_to_index(index)) != 0
        except (pygit2.GitError, KeyError):
            # HEAD's checkpoint lost objects (a damaged pack was set aside):
            # the work tree's record starts again from the initial checkpoint.
            repairs.append(
                f"HEAD's checkpoint {str(head.id)[:10]} is missing objects; reset HEAD to "
                f"the initial checkpoint {initial_sha[:10]}"
            )
            head = repo[initial_sha].peel(pygit2.Commit)
            if writer:
                repo.set_head(head.id)
            lags = True
        self._head = str(head.id)
        if self._logged_head is not None:
            # Beside a live run: HEAD on disk is saved with the log's move into
            # git, so while the log holds checkpoints the newest is the owner's.
            # (The base tree stays HEAD's: the index describes that one.)
            self._head = self._logged_head
        self._known: dict[str, None] = dict.fromkeys((self._head, initial_sha))
        """Commits known to exist: the latest made or checked here (a snapshot's
        parent is nearly always the one before), bounded by :data:`KNOWN_COMMITS`."""
        self._base_tree: bytes = head.tree_id.raw
        self._complete: set[pygit2.Oid] = set()
        """Trees known to have every object they reach (see :meth:`verify`)."""
        if lags:
            # The index was saved lazily and lags HEAD (a crash): rebuild it from HEAD.
            self._stat.reset(head.tree)
            if writer:
                index.write()
        self._watcher = ChangeWatcher.start(workspace, skip=is_excluded) if watch else None

    # ----------------------------------------------------------------- opening

    def _replay(self, writer: bool) -> dict[bytes, tuple[int, bytes]]:
        """Puts what the checkpoint log holds into git (its objects; a writer
        also moves the branches and empties the log). Returns the mapping of
        logged objects not yet in git that the tree editor reads: the writer's
        log fills it from now on; a read-only opener's stays empty."""
        path = self.git_dir / LOG_NAME
        replayed = read_log(path)
        if replayed.torn:
            self.repairs.append(
                f"ignored {replayed.torn} bytes of a checkpoint cut short in {path}"
                if writer
                else f"{path} ends in a record being written ({replayed.torn} bytes)"
            )
        try:
            if replayed.objects:
                write_pack(
                    self._pack_dir, [(k, sha, body) for sha, (k, body) in replayed.objects.items()]
                )
            if not writer:
                self._overlay = dict(replayed.tips)
                self._logged_head = replayed.head
                return {}
            for refname, sha in replayed.tips.items():
                self._repo.references.create(refname, pygit2.Oid(hex=sha), force=True)
            if replayed.records:
                self.repairs.append(
                    f"moved {replayed.records} checkpoint(s) from the checkpoint log into git"
                )
            self._log = CheckpointLog(path)
        except (OSError, pygit2.GitError) as exc:
            raise CheckpointStorageError(
                f"could not replay the checkpoint log {path}: {exc}. Check free disk space "
                "and the folder's permissions; the log is kept for the next try."
            ) from exc
        return self._log.objects

    @classmethod
    def open_or_create(
        cls,
        git_dir: Path | str,
        workspace: Path | str,
        *,
        watch: bool = True,
        writer: bool = True,
    ) -> CheckpointRepo:
        """Opens (creating, repairing or rebuilding as needed) the shadow repository.

        ``watch`` enables the inotify change hints (Linux); without them every
        snapshot compares all covered files. ``writer`` is for the process that
        holds the runtime lock: it logs checkpoints (see the module docstring);
        an opener beside a live run passes ``False``. ``repairs`` on the result
        lists anything that had to be fixed.
        """
        git_dir = Path(os.path.abspath(git_dir))
        workspace = Path(os.path.abspath(workspace))
        if not writer and not git_dir.exists():
            # Beside a live run, creating the run's repository (or its
            # workspace) would race the run doing the same.
            raise CheckpointStorageError(
                f"there is no checkpoint repository at {git_dir} to read; nothing was "
                "created. It is made when a run of this execution starts (`weft run`)."
            )
        try:
            workspace.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointStorageError(
                f"workspace {workspace} could not be created: {exc.strerror or exc}"
            ) from exc
        if not workspace.is_dir():
            raise CheckpointStorageError(f"workspace {workspace} is not a folder")
        try:
            opened = open_storage(git_dir, repair=writer)
        except OSError as exc:
            raise CheckpointStorageError(
                f"checkpoint storage could not be read: {exc.filename or git_dir}: "
                f"{exc.strerror or exc}. Check the folder's permissions and the disk."
            ) from exc
        except pygit2.GitError as exc:
            # Damage the repair pass does not handle (a corrupted loose ref).
            raise CheckpointStorageError(
                f"checkpoint repository {git_dir} is damaged: {exc}. Nothing was run; "
                "restore it from a backup, or start over with `weft run --new --force`"
            ) from exc
        opened.repo.workdir = str(workspace)
        return cls(
            git_dir,
            workspace,
            opened.repo,
            initial_sha=opened.initial_sha,
            repairs=opened.repairs,
            created=opened.created,
            watch=watch,
            writer=writer,
        )

    def _load_index(self) -> pygit2.Index:
        try:
            index: pygit2.Index = self._repo.index
        except pygit2.GitError as exc:
            path = self.git_dir / "index"
            if not self._writer:
                raise CheckpointStorageError(
                    f"the checkpoint index {path} cannot be read ({exc}); it was left alone. "
                    "The run that owns it rebuilds it when it next starts (`weft run`)."
                ) from exc
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            self.repairs.append(f"removed the unreadable index {path}; it is rebuilt from HEAD")
            index = self._repo.index
        return index

    def close(self) -> None:
        """Saves the index, stops the watcher and releases the repository."""
        with self._lock:
            if self._closed:
                return
            if self._watcher is not None:
                self._watcher.close()
            with contextlib.suppress(pygit2.GitError, OSError, CheckpointError):
                self._save_index(force=True)
            self._closed = True
            if self._log is not None:
                self._log.close()
            self._repo.free()

    def __enter__(self) -> CheckpointRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def git_env(self) -> dict[str, str]:
        """Environment for running the git CLI on this repository (isolated config).

        The checkpoint log is moved into git first, so the CLI sees every checkpoint.
        """
        self.sync()
        return git_environment(self.git_dir, self.workspace)

    def sync(self) -> None:
        """Moves every logged checkpoint into git's own files (objects, branches,
        HEAD, index) now, for readers that do not go through this object."""
        with self._lock:
            if not self._closed:  # closing synced it
                self._save_index(force=True)

    def drain_changes(self) -> None:
        """Reads pending change notifications (call now and then to keep the queue short)."""
        watcher = self._watcher
        if watcher is not None:
            watcher.drain()

    def maintain(self, *, over: int = CONSOLIDATE_OVER, quiet_for: float = 0.0) -> int:
        """Merges the small packs once more than ``over`` accumulated.

        Meant for idle moments (the async wrapper calls it once a second):
        a merge takes up to a fraction of a second, which a checkpoint asked
        for meanwhile would wait. With ``quiet_for``, it merges only when no
        snapshot was taken for that many seconds (an agent at work), unless
        more than :data:`MAINTAIN_ANYWAY` packs wait (codons that take no
        time at all). Returns how many packs were merged.
        """
        with self._lock:
            self._check_open()
            self._flush()
            if not self._writer or self._packs_unmerged <= over:
                return 0  # merging is the owner's: its libgit2 knows the packs
            busy = time.monotonic() - self._last_snapshot < quiet_for
            if busy and self._packs_unmerged <= MAINTAIN_ANYWAY:
                return 0
            self._save_index(force=True)
            merged = consolidate_packs(self._repo, over=over)
            # libgit2 may still know the removed packs: start from a fresh handle.
            self._repo.free()
            try:
                self._repo = pygit2.Repository(str(self.git_dir), RepositoryOpenFlag.NO_SEARCH)
            except pygit2.GitError as exc:
                self._closed = True
                raise CheckpointStorageError(
                    f"checkpoint repository {self.git_dir} could not be reopened after "
                    f"merging packs ({exc}); restart Weft to repair it"
                ) from exc
            self._repo.workdir = self._root
            self._stat = StatIndex(self._repo, self._repo.index, self._root, owned=self._writer)
            self._editor = TreeEditor(self._repo, {} if self._log is None else self._log.objects)
            self._disk_tips.clear()
            self._packs_unmerged = 0
            return merged

    @property
    def watching(self) -> bool:
        """Whether inotify change hints are in use."""
        return self._watcher is not None and self._watcher.usable

    # ------------------------------------------------------------------ reads

    def head(self) -> str:
        """The checkpoint the workspace was last synchronised with (snapshot or restore)."""
        with self._lock:
            return self._head

    def branch_tip(self, name: str) -> str | None:
        """The SHA at the tip of branch ``name`` (``run-…``, ``main``, ``recovery/…``), or None."""
        with self._lock:
            self._check_open()
            self._flush()
            return self._lookup_branch(name)

    def exists(self, sha: str) -> bool:
        """Whether ``sha`` (40 hex digits) is a checkpoint commit present in the repository."""
        return sha in self.verify([sha])

    def verify(self, shas: Iterable[str]) -> set[str]:
        """The subset of ``shas`` that are commits present in git with every
        tree and file they reach (a checkpoint that could be restored whole)."""
        with self._lock:
            self._check_open()
            self._flush()
            present: set[str] = set()
            for sha in shas:
                if not isinstance(sha, str) or not _FULL_HEX.fullmatch(sha):
                    continue
                try:
                    obj = self._repo.get(sha)
                    if isinstance(obj, pygit2.Commit) and self._tree_complete(obj.tree_id):
                        present.add(sha)
                except (pygit2.GitError, ValueError, KeyError):
                    continue
            return present

    def _tree_complete(self, tree_id: pygit2.Oid) -> bool:
        """Whether the tree and everything below it are in git. Complete trees
        are remembered, so checking many checkpoints reads each tree once."""
        if tree_id in self._complete:
            return True
        tree = self._repo.get(tree_id)
        if not isinstance(tree, pygit2.Tree):
            return False
        for entry in tree:
            if entry.type_str == "tree":
                if not self._tree_complete(entry.id):
                    return False
            elif entry.type_str == "blob" and entry.id not in self._repo.odb:
                return False
        self._complete.add(tree_id)
        return True

    def resolve(self, prefix: str) -> str:
        """The full SHA of the checkpoint whose SHA starts with ``prefix`` (4+ hex digits)."""
        text = prefix.strip().lower() if isinstance(prefix, str) else ""
        if not _HEX.fullmatch(text):
            raise CheckpointNotFoundError(
                f"{prefix!r} is not a checkpoint SHA: give 4 to 40 hexadecimal characters "
                "(see the checkpoint list)",
                sha=str(prefix),
            )
        with self._lock:
            self._check_open()
            self._flush()
            found = sorted(sha for sha in self._all_commits() if sha.startswith(text))
            if not found and len(text) == 40 and self.exists(text):
                found = [text]
        if not found:
            raise CheckpointNotFoundError(
                f"Checkpoint {prefix} not found in any run (current or historical)", sha=prefix
            )
        if len(found) > 1:
            shown = ", ".join(s[:12] for s in found[:5])
            more = "" if len(found) <= 5 else f" and {len(found) - 5} more"
            raise AmbiguousCheckpointError(
                f"Ambiguous checkpoint SHA '{prefix}': it matches {len(found)} checkpoints "
                f"({shown}{more}); give more characters",
                prefix=prefix,
                candidates=found,
            )
        return found[0]

    def list(self, run_id: str | None = None) -> _Checkpoints:
        """The checkpoints of one run, or of every run; newest first."""
        with self._lock:
            self._check_open()
            self._flush()
            if run_id is not None:
                branches = [run_branch(run_id)]
            else:
                names = dict.fromkeys([*self._repo.listall_references(), *self._overlay])
                branches = [
                    name[len("refs/heads/") :]
                    for name in names
                    if name.startswith("refs/heads/run-")
                ]
            found: _Found = []
            order = 0
            for branch in branches:
                tip = self._lookup_branch(branch)
                if tip is None:
                    continue
                branch_run = branch[len("run-") :]
                commit = self._repo.get(tip)
                while isinstance(commit, pygit2.Commit):
                    parents = commit.parent_ids
                    parent = str(parents[0]) if parents else None
                    cp = parse_message(
                        commit.message, sha=str(commit.id), branch=branch, parent=parent
                    )
                    if cp is None or cp.run_id != branch_run:
                        break
                    found.append((-commit.commit_time, order, cp))
                    order += 1
                    commit = self._repo.get(parents[0]) if parents else None
            found.sort(key=lambda item: (item[0], item[1]))
            return [cp for _, _, cp in found]

    def files(self, sha: str) -> dict[str, bytes]:
        """The files of checkpoint ``sha`` as path -> content (symlinks give their target)."""
        with self._lock:
            self._check_open()
            self._flush()
            tree = self._commit(sha).tree_id.raw
            out: dict[str, bytes] = {}
            for path, (_mode, blob_sha) in self._editor.walk(tree):
                blob = self._repo.get(pygit2.Oid(raw=blob_sha))
                if isinstance(blob, pygit2.Blob):
                    out[path] = blob.data
            return out

    # -------------------------------------------------------------- mutations

    def snapshot(
        self,
        patterns: Sequence[str],
        *,
        branch: str,
        parent_expected: str,
        kind: str,
        codon_id: str,
        run_id: str,
        codon_name: str,
        duration_ms: int | None = None,
        timestamp: str | None = None,
    ) -> str:
        """Commits the covered workspace files as a checkpoint; returns its SHA.

        The tree holds exactly the files ``patterns`` cover (deleted ones are
        gone from it). The commit's parent is ``parent_expected``; if
        ``branch`` already exists its tip must be that parent, otherwise
        :class:`CheckpointConflictError` is raised and nothing is committed.
        """
        return self._snapshot(
            patterns,
            branch=branch,
            parent_expected=parent_expected,
            kind=kind,
            codon_id=codon_id,
            run_id=run_id,
            codon_name=codon_name,
            duration_ms=duration_ms,
            timestamp=timestamp,
            save=True,
        )

    def _snapshot(
        self,
        patterns: Sequence[str],
        *,
        branch: str,
        parent_expected: str,
        kind: str,
        codon_id: str,
        run_id: str,
        codon_name: str,
        duration_ms: int | None,
        timestamp: str | None,
        save: bool,
    ) -> str:
        """:meth:`snapshot`; without ``save``, a save of the index and move of the
        log into git that is due is left for :meth:`save` (see :attr:`save_due`)."""
        if kind not in CHECKPOINT_TYPES:
            raise CheckpointError(
                f"unknown checkpoint type {kind!r}: use one of {', '.join(CHECKPOINT_TYPES)}"
            )
        when = timestamp or utc_now_iso()
        moment = _parse_time(when)
        with self._lock:
            self._check_open()
            pset = self._compile(patterns)
            refname = self._refname(branch)
            parent = self._known_commit(parent_expected)
            self._check_tip(branch, parent)
            message = format_message(
                checkpoint_type=kind,
                codon_id=codon_id,
                run_id=run_id,
                codon_name=codon_name,
                timestamp=when,
                duration_ms=duration_ms,
                patterns=list(pset.patterns),
            )
            return self._checkpoint(
                pset, refname, branch, parent, message, moment, save=save, drained=not save
            )

    def snapshot_now(
        self,
        patterns: Sequence[str],
        *,
        branch: str,
        parent_expected: str,
        kind: str,
        codon_id: str,
        run_id: str,
        codon_name: str,
        duration_ms: int | None = None,
        timestamp: str | None = None,
    ) -> str | None:
        """:meth:`snapshot`, when it is known to be short; ``None`` (nothing done) otherwise.

        Short means: the change watcher vouches for at most :data:`QUICK_PATHS`
        changed files of at most :data:`QUICK_BYTES` together, the patterns are
        those of the last checkpoint, and no other thread is using the
        repository. An event loop takes such a checkpoint itself: handing it to
        a worker thread cost more than the checkpoint (the two threads contend
        for the interpreter), and the caller waits for it either way. A save
        of the index and move of the log into git that comes due is not made
        here (it creates and renames files): :attr:`save_due` says so, and the
        caller has :meth:`save` run elsewhere.
        """
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if not self._quick(patterns):
                return None
            return self._snapshot(
                patterns,
                branch=branch,
                parent_expected=parent_expected,
                kind=kind,
                codon_id=codon_id,
                run_id=run_id,
                codon_name=codon_name,
                duration_ms=duration_ms,
                timestamp=timestamp,
                save=False,
            )
        finally:
            self._lock.release()

    @property
    def save_due(self) -> bool:
        """Whether the index and HEAD are due to be saved (and the log moved into
        git): a checkpoint does it itself, :meth:`snapshot_now` leaves it for :meth:`save`."""
        pending = self._log
        records, size, since = (
            (0, 0, 0.0) if pending is None else (pending.records, pending.size, pending.since)
        )
        retry = self._retry_move_at
        if records and retry is not None and records < retry[0] and size < retry[1]:
            return False  # HEAD was locked: not at every checkpoint
        return (
            self._snapshots_unsaved >= INDEX_WRITE_EVERY
            or self._changes_unsaved >= INDEX_WRITE_CHANGES
            or records >= FLUSH_EVERY
            or size >= FLUSH_BYTES
            or (records > 0 and time.monotonic() - since >= FLUSH_AFTER)
        )

    def save(self) -> None:
        """Saves what :attr:`save_due` says is due, as a checkpoint would have."""
        with self._lock:
            self._check_open()
            self._save_index()

    def _quick(self, patterns: Sequence[str]) -> bool:
        """Whether a checkpoint of ``patterns`` now is short (see :meth:`snapshot_now`)."""
        pending = self._log
        watcher = self._watcher
        if (
            self._closed
            or pending is None
            or watcher is None
            or self._retry_move_at is not None
            or self._synced is None
            or self._compile(patterns) is not self._synced
        ):
            return False
        dirty = watcher.peek(QUICK_PATHS)
        if dirty is None:
            return False
        size = 0
        for path in dirty:
            if path.rsplit("/", 1)[-1] == ".gitignore":
                return False  # new ignore rules: a full comparison
            try:
                st = os.lstat(os.path.join(self._root, path))
            except FileNotFoundError:
                continue
            except OSError:
                return False  # the checkpoint reports it, from the worker
            if stat.S_ISDIR(st.st_mode):
                return False  # a new folder may hold any number of files
            size += st.st_size
            if size > QUICK_BYTES:
                return False
        return True

    def recovery_snapshot(
        self, patterns: Sequence[str], *, run_id: str | None = None, reason: str = ""
    ) -> RecoverySnapshot:
        """Saves the covered work tree to a new ``recovery/<time>-<id>`` branch.

        Its parent is the current checkpoint (:meth:`head`). Nothing else moves.
        """
        when = utc_now_iso()
        moment = _parse_time(when)
        stamp = when.replace(":", "-").replace(".", "-")
        branch = f"recovery/{stamp}-{uuid.uuid4().hex[:8]}"
        with self._lock:
            self._check_open()
            pset = self._compile(patterns)
            refname = self._refname(branch)
            message = format_recovery_message(run_id=run_id, reason=reason, timestamp=when)
            sha = self._checkpoint(pset, refname, branch, self._head, message, moment)
            return RecoverySnapshot(branch=branch, sha=sha)

    def restore(self, sha: str, patterns: Sequence[str]) -> RestoreResult:
        """Makes the covered workspace files exactly those of checkpoint ``sha``.

        Covered files that the checkpoint lacks are removed (and directories
        left empty by that), the checkpoint's files are written where they
        differ; files the patterns do not cover are left alone. ``sha`` may be a
        unique prefix.
        """
        with self._lock:
            self._check_open()
            self._flush()
            pset = self._compile(patterns)
            full = self.resolve(sha) if not _FULL_HEX.fullmatch(sha) else sha
            target_commit = self._commit(full)
            target_tree = target_commit.tree_id.raw
            scan = self._scan(pset, keep_content=False)
            base = dict(self._editor.walk(self._base_tree))
            current = dict(base)
            for path, value in scan.changes.items():
                if value is None:
                    current.pop(path, None)
                else:
                    current[path] = value
            target = dict(self._editor.walk(target_tree))
            result = RestoreResult(sha=full)
            result.removed = sorted(p for p in current if p not in target and pset.matches(p))
            result.written = sorted(p for p, v in target.items() if current.get(p) != v)
            remove_files(self._root, result.removed)
            written = {path: self._restore_file(path, target[path]) for path in result.written}
            for path in base:
                if path not in target:
                    self._stat.remove(path)
            # Each file is recorded with the stat it had when its content was known
            # (written here, or read by the comparison), never one taken later: a
            # write in between would otherwise go unseen.
            for path, entry in target.items():
                if path in written:
                    st, taken = written[path]
                    self._stat.add(path, entry, st, taken)
                elif path in scan.stats:
                    self._stat.add(path, entry, scan.stats[path])
                elif base.get(path) != entry:
                    self._stat.add_from_disk(path, entry)
            self._base_tree = target_tree
            self._head = full
            self._head_unsaved = True
            self._synced = None  # the target may predate these patterns: rescan next time
            self._save_index(force=True)
            return result

    # -------------------------------------------------------------- internals

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError("the checkpoint repository is closed; open it again")

    def _compile(self, patterns: Sequence[str]) -> PatternSet:
        if isinstance(patterns, str):
            patterns = [patterns]
        key = tuple(patterns)
        pset = self._patterns.get(key)
        if pset is None:
            pset = PatternSet.compile(key)
            if len(self._patterns) > 256:
                self._patterns.clear()
            self._patterns[key] = pset
        return pset

    def _refname(self, branch: str) -> str:
        refname = f"refs/heads/{branch}"
        if not isinstance(branch, str) or not branch or not pygit2.reference_is_valid_name(refname):
            raise CheckpointError(
                f"{branch!r} is not a valid branch name for a checkpoint history: "
                "use run-<runId>, main or recovery/<name> without spaces, '..', '~', '^' or ':'"
            )
        return refname

    def _lookup_branch(self, branch: str) -> str | None:
        refname = f"refs/heads/{branch}"
        if self._log is not None:
            logged = self._log.tips.get(refname)
            if logged is not None:
                return logged
            if refname in self._disk_tips:
                return self._disk_tips[refname]
        elif refname in self._overlay:
            return self._overlay[refname]
        ref = self._repo.references.get(refname)
        target = None if ref is None else ref.resolve().target
        tip = str(target) if isinstance(target, pygit2.Oid) else None
        if self._log is not None:
            self._disk_tips[refname] = tip
        return tip

    def _commit(self, sha: str) -> pygit2.Commit:
        if not isinstance(sha, str) or not _FULL_HEX.fullmatch(sha):
            raise CheckpointNotFoundError(
                f"{sha!r} is not a full checkpoint SHA (40 hexadecimal characters); "
                "resolve a prefix with resolve() first",
                sha=str(sha),
            )
        try:
            obj = self._repo.get(sha)
        except (pygit2.GitError, ValueError):
            obj = None
        if not isinstance(obj, pygit2.Commit):
            raise CheckpointNotFoundError(
                f"Checkpoint {sha} not found in any run (current or historical)", sha=sha
            )
        return obj

    def _remember(self, sha: str) -> None:
        known = self._known
        known[sha] = None
        if len(known) > KNOWN_COMMITS:
            # Oldest first: the set must not grow with the run.
            del known[next(iter(known))]

    def _known_commit(self, sha: str) -> str:
        """``sha`` if it names a commit; commits made here are not looked up again."""
        if sha not in self._known:
            self._commit(sha)
            self._remember(sha)
        return sha

    def _check_tip(self, branch: str, expected: str) -> None:
        tip = self._lookup_branch(branch)
        if tip is not None and tip != expected:
            raise self._conflict(branch, expected, tip)

    @staticmethod
    def _conflict(branch: str, expected: str, actual: str | None) -> CheckpointConflictError:
        return CheckpointConflictError(
            f"checkpoint history conflict on branch {branch}: its tip is {actual} but the "
            f"checkpoint expected parent {expected}. Another writer moved the branch, or the "
            "current checkpoint is stale: re-read the branch tip and retry.",
            branch=branch,
            expected=expected,
            actual=actual,
        )

    def _checkpoint(
        self,
        pset: PatternSet,
        refname: str,
        branch: str,
        parent: str,
        message: str,
        moment: datetime,
        *,
        save: bool = True,
        drained: bool = False,
    ) -> str:
        """Synchronises with the workspace, commits on ``parent``, moves ``branch``
        (and, with ``save``, saves the index and moves the log into git when due;
        ``drained``: the watcher's queue was just read, under the same lock)."""
        scan = self._scan(pset, keep_content=True, drained=drained)
        tree = self._base_tree
        objects = scan.blobs
        if scan.changes:
            try:
                tree, trees = self._editor.apply(self._base_tree, scan.changes)
            except TreeError as exc:
                raise CheckpointStorageError(
                    f"checkpoint repository {self.git_dir} is missing objects ({exc}); "
                    "restart Weft to repair it"
                ) from exc
            objects = [*objects, *trees]
        body = _commit_body(tree, parent, message, moment)
        sha = object_id(OBJ_COMMIT, body)
        commit = sha.hex()
        objects = [*objects, (OBJ_COMMIT, sha, body)]
        if self._log is not None:
            self._log_checkpoint(objects, refname, commit)
        else:
            self._write_objects(objects)
        # The objects are in place: the index now describes this commit's tree.
        for path, value in scan.changes.items():
            if value is None:
                self._stat.remove(path)
            else:
                self._stat.add(path, value, scan.stats[path])
        self._base_tree = tree
        self._synced = pset
        self._head = commit
        self._head_unsaved = True
        self._remember(commit)
        self._changes_unsaved += len(scan.changes)
        self._snapshots_unsaved += 1
        if self._log is None:
            self._move_branch(refname, branch, parent, commit)
        if save:
            self._save_index()
        self._last_snapshot = time.monotonic()
        return commit

    def _write_objects(self, objects: _Objects) -> None:
        try:
            if write_pack(self._pack_dir, objects) is not None:
                self._packs_unmerged += 1
        except OSError as exc:
            raise CheckpointStorageError(
                f"could not write checkpoint objects to {self._pack_dir}: "
                f"{exc.strerror or exc}. Check free disk space."
            ) from exc

    def _log_checkpoint(self, objects: _Objects, refname: str, commit: str) -> None:
        """Appends the checkpoint to the log (its objects go to git at once when
        large). The branch's tip was checked under the same lock: only this
        repository moves a logged branch."""
        assert self._log is not None
        if sum(len(body) for _kind, _sha, body in objects) > LOG_OBJECTS_MAX:
            self._write_objects(objects)
            objects = []
        try:
            self._log.append(objects, [(refname, commit)])
        except OSError as exc:
            raise CheckpointStorageError(
                f"could not write the checkpoint log {self._log.path}: "
                f"{exc.strerror or exc}. Check free disk space."
            ) from exc

    def _flush(self) -> None:
        """Moves what the checkpoint log holds into git: one pack, each branch
        once; then saves the index and HEAD, so that git's files alone (read
        by an opener beside the run, or the git CLI) name the newest checkpoint."""
        pending = self._log
        if pending is None or not pending.records:
            return
        # Before reads and in idle moments: a HEAD or index another process has
        # locked (the git CLI) is saved later, not reported as a failed read.
        if self._move_log(pending, quiet=True):
            try:
                self._save_cache()
            except CheckpointStorageError as exc:
                log.warning("%s; it is saved with the next move into git", exc)

    def _move_log(self, pending: CheckpointLog, *, quiet: bool = False) -> bool:
        """Puts the log's objects and branch moves into git, saves HEAD, empties the
        log. False, with the log kept whole, when HEAD could not be saved and ``quiet``:
        an opener beside the run then still finds the newest checkpoint in the log."""
        moved = self._moved_objects
        objects = [(kind, sha, body) for sha, (kind, body) in pending.objects.items()]
        self._write_objects([o for o in objects if o[1] not in moved])
        # Until the log is emptied (HEAD saved), a later move packs only what is new.
        moved.update(o[1] for o in objects)
        for refname, commit in pending.tips.items():
            try:
                self._write_ref(refname, commit)
            except FileExistsError as exc:
                # A git command holds the branch's lock: as for HEAD below.
                error = CheckpointStorageError(
                    f"could not move {refname} to checkpoint {commit}: {exc}; if no git "
                    f"command is running there, remove {exc.filename}"
                )
                if not quiet:
                    raise error from exc
                log.warning("%s; the checkpoint log keeps the checkpoints meanwhile", error)
                return False
            except OSError as exc:
                raise CheckpointStorageError(
                    f"could not move {refname} to checkpoint {commit}: {exc}. "
                    f"Check the disk and {self.git_dir}; the checkpoint log keeps it."
                ) from exc
            self._disk_tips[refname] = commit
        try:
            self._save_head()
        except CheckpointStorageError as exc:
            if not quiet:
                raise
            log.warning("%s; the checkpoint log keeps the checkpoints meanwhile", exc)
            return False
        moved.clear()
        self._retry_move_at = None
        try:
            pending.clear()
        except OSError as exc:
            raise CheckpointStorageError(
                f"could not empty the checkpoint log {pending.path}: {exc.strerror or exc}"
            ) from exc
        return True

    def _move_branch(self, refname: str, branch: str, parent: str, commit: str) -> None:
        oid = pygit2.Oid(hex=commit)
        try:
            ref = self._repo.references.get(refname)
            if ref is None:
                self._repo.references.create(refname, oid)
            elif str(ref.target) != parent:
                raise self._conflict(branch, parent, str(ref.target))
            else:
                # libgit2 compares against the target read above (compare-and-swap).
                ref.set_target(oid)
        except (pygit2.AlreadyExistsError, pygit2.GitError) as exc:
            tip = self._lookup_branch(branch)
            if tip is not None and tip != parent:
                raise self._conflict(branch, parent, tip) from exc
            raise CheckpointStorageError(
                f"could not move branch {branch} to checkpoint {commit}: {exc}. "
                f"Check the disk and {self.git_dir}."
            ) from exc

    def _scan(self, pset: PatternSet, *, keep_content: bool, drained: bool = False) -> Scan:
        """What differs between the index and the workspace, for the files ``pset`` covers."""
        scan = Scan()
        synced = self._synced
        full = synced is None or synced.patterns != pset.patterns
        if full and (synced is None or not pset.is_superset_of(synced)):
            for path in self._stat.paths():
                if not pset.matches(path):
                    scan.changes[path] = None
        dirty = self._watcher.take(drain=not drained) if self._watcher is not None else None
        scanner = WorkspaceScanner(self._stat, pset, scan, keep_content=keep_content)
        if full or dirty is None or any(p.rsplit("/", 1)[-1] == ".gitignore" for p in dirty):
            # New ignore rules can un-ignore files that raised no event: compare everything.
            scanner.compare_all()
        else:
            scanner.compare_paths(dirty)
        return scan

    def _restore_file(self, path: str, entry: Entry) -> tuple[os.stat_result, int]:
        mode, sha = entry
        blob = self._repo.get(pygit2.Oid(raw=sha))
        if not isinstance(blob, pygit2.Blob):
            raise CheckpointStorageError(
                f"checkpoint object {sha.hex()} for {path} is missing: the checkpoint "
                f"repository {self.git_dir} is damaged; restart Weft to repair it"
            )
        return write_file(
            self._root, path, blob.data, executable=mode == MODE_EXEC, link=mode == MODE_LINK
        )

    def _save_index(self, *, force: bool = False) -> None:
        """Writes the index and HEAD back, every few snapshots (they are caches of memory).

        After a crash they may lag; opening notices HEAD's tree and the index
        disagree and rebuilds the index from HEAD, which is always correct.
        """
        pending = self._log
        records, size = (0, 0) if pending is None else (pending.records, pending.size)
        if not force and not self.save_due:
            return
        # HEAD and the index may name only objects git has.
        # Inside a snapshot, a HEAD a git command holds locked fails nothing: the
        # checkpoint is in the log (and now in git); the move is tried again once
        # the log has doubled.
        if pending is not None and records and not self._move_log(pending, quiet=not force):
            self._retry_move_at = (2 * records, max(FLUSH_BYTES, 2 * size))
            return
        if force:
            self._save_cache()
            return
        try:
            self._save_cache()
        except CheckpointStorageError as exc:
            log.warning("%s; it is saved at the next try", exc)

    def _save_head(self) -> None:
        """Writes HEAD if it moved (the owner's only)."""
        if not self._writer or not self._head_unsaved:
            return
        try:
            self._write_ref("HEAD", self._head)
        except OSError as exc:
            raise CheckpointStorageError(
                f"could not save HEAD of {self.git_dir} ({exc}); if no git command is "
                f"running there, remove {self.git_dir / 'HEAD.lock'}"
            ) from exc
        self._head_unsaved = False

    def _write_ref(self, name: str, commit: str) -> None:
        """Points ``name`` (``HEAD``, detached, or a ``refs/`` name this class made)
        at ``commit`` as git does: written to ``<name>.lock``, which must not exist
        (a git command holds it), then renamed over the old file.

        libgit2's own write first looks the commit up, and a commit in a pack it
        has not opened yet makes it read the pack folder again. The objects are
        known to be in git here: they were moved just before.
        """
        path = self.git_dir / name
        lock = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                os.write(fd, f"{commit}\n".encode())
            finally:
                os.close(fd)
            os.replace(lock, path)
        except BaseException:
            lock.unlink(missing_ok=True)
            raise

    def _save_cache(self) -> None:
        """Writes HEAD and the index (the owner's only)."""
        if not self._writer:
            # The owner keeps them (its own, in memory): writing ours would
            # take their lock files from under it and could fail its checkpoint.
            return
        self._save_head()
        try:
            self._stat.write()
        except (pygit2.GitError, OSError) as exc:
            raise CheckpointStorageError(
                f"could not save the index of {self.git_dir} ({exc}); if no git command is "
                f"running there, remove {self.git_dir / 'index.lock'}"
            ) from exc
        self._snapshots_unsaved = 0
        self._changes_unsaved = 0

    def _all_commits(self) -> set[str]:
        tips: list[pygit2.Oid | str] = [
            ref.target
            for name in self._repo.listall_references()
            if (ref := self._repo.references.get(name)) is not None
            and isinstance(ref.target, pygit2.Oid)
        ]
        tips.extend(self._overlay.values())
        seen: set[str] = set()
        if not tips:
            return seen
        walker = self._repo.walk(tips[0], SortMode.NONE)
        for tip in tips[1:]:
            walker.push(tip)
        for commit in walker:
            seen.add(str(commit.id))
        return seen


def _commit_body(tree: bytes, parent: str, message: str, moment: datetime) -> bytes:
    who = f"{AUTHOR_NAME} <{AUTHOR_EMAIL}> {int(moment.timestamp())} +0000"
    return (
        f"tree {tree.hex()}\nparent {parent}\nauthor {who}\ncommitter {who}\n\n{message}"
    ).encode()


def _parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError) as exc:
        raise CheckpointError(
            f"checkpoint timestamp {text!r} is not ISO 8601 (e.g. 2025-01-31T12:00:00.000Z)"
        ) from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


__all__ = [
    "MAIN_BRANCH",
    "CheckpointRepo",
    "RecoverySnapshot",
    "RestoreResult",
    "run_branch",
]
