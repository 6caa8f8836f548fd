"""Execution directories: which one ``weft run`` uses, and making it ready.

An *execution* is a directory holding one hank's work on one data set,
across any number of runs (its parts: :mod:`weft.runtime.execution.layout`).
:func:`prepare_execution` decides between creating and resuming and returns
a :class:`PreparedExecution`. The rules, in order:

* ``execution_dir`` given (``--execution DIR``): resume it when it holds an
  execution, create one in it otherwise. With ``new`` an existing execution
  there is set aside first, which needs ``force`` (``.weft/`` moves to
  ``.weft.backup-<time>/``, and so do ``agentRoot/`` and ``rigArchive/``
  unless ``keep_workspace``). Nothing is ever deleted.
* ``new`` without ``execution_dir``: always a new directory under the
  managed root (``~/.weft-executions``, or ``WEFT_RUNTIME_EXECUTION_BASE_DIR``).
* Otherwise: resume the most recently used managed execution made for the
  **same hank file** (by resolved path) **and the same data** (by data
  hash); if there is none, create one. The reference runtime matches on the
  data hash alone; Weft also requires the hank, so two hanks run on the same
  data (or on none) never resume each other's work.

On resume, a hank whose normalised JSON changed since the execution last used
it is confirmed (interactive), accepted (``yes`` or ``force``) or refused
(:class:`HankChangedError`). The run-shaping settings kept with the execution
(:class:`~weft.runtime.execution.meta.RunSettings`: the model, the sentinel model, the
ceilings given as flags) go on when a run does not give them; a different
model or sentinel model is handled like a changed hank (confirmed, accepted or
refused with :class:`RunSettingsChangedError`), and a different ceiling
replaces the kept one (said in :attr:`PreparedExecution.notes`). Everything
here blocks (hashing, copying, fsync): async callers run it in
``asyncio.to_thread``.

The pieces it builds on, one job each: :mod:`weft.runtime.execution.layout` (paths),
:mod:`weft.runtime.execution.meta` (``execution-meta.json``), :mod:`weft.runtime.execution.datahash`
(hank and data fingerprints), :mod:`weft.runtime.execution.datalink` (the data slot),
:mod:`weft.runtime.execution.errors` (the errors). The names they export are
re-exported here for callers that prepare executions.

Why this module stays whole at about 600 lines: it is the decision between
creating and resuming, and its functions are the rules listed above, in that
order; split further, the rules would be read across modules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import secrets
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from weft.clock import utc_now_iso
from weft.config.schema import Hank, Loop
from weft.errors import ConfigError, LockHeldError, WeftError
from weft.filemodes import folder_mode, private_folder
from weft.runtime.execution.basedir import BASE_DIR_ENV, managed_base_dir
from weft.runtime.execution.datahash import (
    DEFAULT_DATA_HASH_TIME_LIMIT,
    DataHash,
    hank_hash,
    hash_data,
)
from weft.runtime.execution.datalink import backup_stamp, link_data, link_intact, park_data
from weft.runtime.execution.errors import (
    DataMismatchError,
    ExecutionMetaError,
    ExecutionSetupError,
    HankChangedError,
    InputPathError,
)
from weft.runtime.execution.layout import (
    DATA_LINK,
    HANK_FILE,
    META_FILE,
    WEFT_DIR,
    WORKSPACE,
    ExecutionLayout,
)
from weft.runtime.execution.meta import (
    META_VERSION,
    TEMP_SUFFIX,
    ExecutionEnvironment,
    ExecutionMeta,
    RunSettings,
    current_environment,
    read_meta,
    weft_version,
    write_meta,
)
from weft.runtime.run.replan import PrefixChangedError, finished_ids, replan
from weft.store.diskspace import STORAGE_ERRNOS, storage_error
from weft.store.execution import DATABASE, ExecutionStore, live_holder

__all__ = [
    "BASE_DIR_ENV",
    "DATA_LINK",
    "DEFAULT_DATA_HASH_TIME_LIMIT",
    "HANK_FILE",
    "META_FILE",
    "META_VERSION",
    "WEFT_DIR",
    "WORKSPACE",
    "DataHash",
    "DataMismatchError",
    "ExecutionEnvironment",
    "ExecutionLayout",
    "ExecutionMeta",
    "ExecutionMetaError",
    "ExecutionSetupError",
    "HankChangedError",
    "HankLoader",
    "InputPathError",
    "PreparedExecution",
    "Prompt",
    "RunSettings",
    "RunSettingsChangedError",
    "hank_hash",
    "hash_data",
    "managed_base_dir",
    "prepare_execution",
    "read_meta",
    "write_meta",
]


class RunSettingsChangedError(HankChangedError):
    """A run-shaping setting (the model, the sentinel model) differs from the one
    the execution ran with, and the change was not confirmed."""


Prompt = Callable[[str], bool]
"""Asks a yes/no question; ``True`` means yes (the CLI's is :func:`weft.cli.prompts.ask_yes_no`)."""

HankLoader = Callable[[str | None], Hank]
"""Loads the hank as the run sees it with every codon's model replaced (``None``:
the hank's own models); the CLI's wraps :func:`weft.config.load_hank`."""

SETTING_NAMES = {
    "model": "--model",
    "sentinel_model": "--sentinel-model",
    "max_dollars": "--max-cost",
    "max_seconds": "--max-time",
    "max_tokens": "--max-tokens",
}
"""How each :class:`RunSettings` field is given on the command line (the default
names in messages; a caller names another source with ``setting_names``)."""


@dataclass(frozen=True, slots=True)
class PreparedExecution:
    """An execution directory ready for a run.

    ``resumed`` is false for a new execution. ``hank_changed`` says the hank
    differs from the one the execution last ran (and resuming was confirmed).
    ``data_path`` is the data the workspace links to (taken from the metadata
    on a resume without data). ``backup`` is where ``--new --force`` moved the
    previous execution. ``warnings`` are for the user, one line each.
    ``settings`` are the run-shaping settings in force (kept with the execution
    from earlier runs, or given now); ``notes`` say which were kept and which
    replaced, one line each. ``hank_changed`` is also set when the model in force
    differs from the one the stored plan gives the codons not yet run: the run
    then follows the hank as loaded with that model (:mod:`weft.runtime.run.replan`).
    """

    layout: ExecutionLayout
    meta: ExecutionMeta
    resumed: bool
    hank_path: Path
    data_path: Path | None
    hank_changed: bool = False
    backup: Path | None = None
    warnings: tuple[str, ...] = ()
    settings: RunSettings = field(default_factory=RunSettings)
    notes: tuple[str, ...] = ()

    @property
    def execution_id(self) -> str:
        """The execution directory's name."""
        return self.layout.execution_id


@dataclass(slots=True)
class _Context:
    hank_path: Path
    hank_hash: str
    data_path: Path | None
    yes: bool
    force: bool
    interactive: bool
    copy: bool
    time_limit: float
    prompt: Prompt | None
    hank: Hank | None = None
    asked: RunSettings = field(default_factory=RunSettings)
    names: dict[str, str] = field(default_factory=lambda: dict(SETTING_NAMES))
    load_hank: HankLoader | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _data_hash: DataHash | None = None

    @property
    def data_hash(self) -> DataHash:
        if self._data_hash is None:
            self._data_hash = hash_data(self.data_path, time_limit=self.time_limit)
            if self._data_hash.mode == "metadata":
                self.warnings.append(
                    f"hashing the data took longer than {self.time_limit:g} s "
                    f"({self._data_hash.files} files, {self._data_hash.bytes} bytes): it is "
                    "identified by file names, sizes and modification times instead of contents"
                )
        return self._data_hash

    def confirm(
        self, question: str, *, refusal: str, declined: str, error: type[ExecutionSetupError]
    ) -> None:
        """Passes when ``--yes``/``--force`` was given or the user says yes; raises otherwise."""
        if self.yes or self.force:
            return
        if not self.interactive or self.prompt is None:
            raise error(refusal)
        if not self.prompt(question):
            raise error(declined)


def prepare_execution(
    hank_path: Path,
    data_path: Path | None,
    *,
    execution_dir: Path | None = None,
    new: bool = False,
    yes: bool = False,
    force: bool = False,
    interactive: bool,
    base_dir: Path | None = None,
    copy: bool = False,
    keep_workspace: bool = False,
    data_hash_time_limit: float = DEFAULT_DATA_HASH_TIME_LIMIT,
    prompt: Prompt | None = None,
    hank: Hank | None = None,
    settings: RunSettings | None = None,
    setting_names: dict[str, str] | None = None,
    load_hank: HankLoader | None = None,
) -> PreparedExecution:
    """Creates or resumes the execution for ``hank_path`` on ``data_path``.

    See the module docstring for the rules. ``interactive`` says whether a
    person can answer questions (:func:`weft.cli.prompts.is_interactive`);
    ``prompt`` asks them (the CLI passes :func:`weft.cli.prompts.ask_yes_no`;
    without one, a question is refused as in non-interactive mode). ``copy``
    copies the data instead of linking it. ``force`` also relinks an explicit execution to different
    data. ``data_hash_time_limit`` is in seconds (the hank's
    ``overrides.dataHashTimeLimit`` is in milliseconds). ``hank`` is the loaded
    hank (as the run will see it, ``-m`` applied): with it, a resume whose hank
    changed is checked against what already ran (:mod:`weft.runtime.run.replan`);
    without it, any change of the hank's codons is refused. ``settings`` are the
    run-shaping settings this run was given (``None`` fields: not given; they are
    kept with the execution); ``setting_names`` says how each was given, for the
    messages (default: its flag); ``load_hank`` reloads the hank with the model
    in force when it is not the one ``hank`` was loaded with. Raises
    :class:`ExecutionSetupError` subclasses; user data is never deleted. A
    full disk raises :class:`~weft.errors.StorageFullError` naming the file.
    """
    try:
        return _prepare(
            hank_path,
            data_path,
            execution_dir=execution_dir,
            new=new,
            yes=yes,
            force=force,
            interactive=interactive,
            base_dir=base_dir,
            copy=copy,
            keep_workspace=keep_workspace,
            data_hash_time_limit=data_hash_time_limit,
            prompt=prompt,
            hank=hank,
            settings=settings,
            setting_names=setting_names,
            load_hank=load_hank,
        )
    except OSError as e:
        where = e.filename or "the execution directory"
        if e.errno in STORAGE_ERRNOS:
            raise storage_error(str(where), e) from e
        raise ExecutionSetupError(
            f"cannot prepare the execution: {e.strerror or e}: {where}"
        ) from e


def _prepare(
    hank_path: Path,
    data_path: Path | None,
    *,
    execution_dir: Path | None,
    new: bool,
    yes: bool,
    force: bool,
    interactive: bool,
    base_dir: Path | None,
    copy: bool,
    keep_workspace: bool,
    data_hash_time_limit: float,
    prompt: Prompt | None,
    hank: Hank | None = None,
    settings: RunSettings | None = None,
    setting_names: dict[str, str] | None = None,
    load_hank: HankLoader | None = None,
) -> PreparedExecution:
    hank_path = Path(hank_path).absolute()
    if not hank_path.is_file():
        raise InputPathError(f"{hank_path}: hank file not found")
    hank_path = hank_path.resolve()
    if data_path is not None:
        data_path = Path(data_path).absolute()
        if not data_path.exists():
            raise InputPathError(f"{data_path}: data not found")
        data_path = data_path.resolve()
    ctx = _Context(
        hank_path=hank_path,
        hank_hash=hank_hash(hank_path),
        data_path=data_path,
        yes=yes,
        force=force,
        interactive=interactive,
        copy=copy,
        time_limit=data_hash_time_limit,
        prompt=prompt,
        hank=hank,
        asked=settings or RunSettings(),
        names={**SETTING_NAMES, **(setting_names or {})},
        load_hank=load_hank,
    )
    base = managed_base_dir(base_dir)
    if execution_dir is not None:
        root = Path(execution_dir).expanduser().absolute().resolve()
        _check_placement(root, data_path)
        if root.exists() and not root.is_dir():
            raise ExecutionSetupError(f"{root}: exists and is not a directory; choose another path")
        if not root.exists():
            private_folder(root)  # Weft's; a folder the user already had keeps its mode
        with _preparing(root):
            return _explicit(
                ExecutionLayout(root), base, ctx, new=new, keep_workspace=keep_workspace
            )
    if not new:
        found = _find_resumable(base, ctx)
        if found is not None:
            layout, meta = found
            with _preparing(layout.root):
                return _resume(layout, meta, ctx, data_given=data_path is not None)
    root = _new_managed_root(base, ctx.data_hash)
    try:
        return _create(root, ctx)
    except BaseException:
        # Made by this call a moment ago and never used: a half-made managed
        # execution would only be skipped forever (it has no metadata).
        shutil.rmtree(root, ignore_errors=True)
        raise


def _check_placement(root: Path, data: Path | None) -> None:
    if data is None:
        return
    if root == data or root.is_relative_to(data):
        raise ExecutionSetupError(
            f"the execution directory {root} is inside the data {data}: the agent's work would "
            "become part of its own read-only input; choose a directory outside the data"
        )
    layout = ExecutionLayout(root)
    for inner in (layout.workspace, layout.weft_dir):
        if data.is_relative_to(inner):
            raise ExecutionSetupError(
                f"the data {data} is inside the execution's own {inner.name}/ folder; "
                "pass data that lives outside the execution directory"
            )


@contextlib.contextmanager
def _preparing(root: Path) -> Iterator[None]:
    """Holds an exclusive ``flock`` on the execution directory while it is
    created, resumed or set aside: two ``weft run`` started at the same instant
    prepare one after the other, and the second sees what the first made (its
    run then refuses at the runtime lock, "already running", instead of both
    writing the same files)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _explicit(
    layout: ExecutionLayout, base: Path, ctx: _Context, *, new: bool, keep_workspace: bool
) -> PreparedExecution:
    root = layout.root
    if root.exists() and not root.is_dir():
        raise ExecutionSetupError(f"{root}: exists and is not a directory; choose another path")
    has_weft = layout.weft_dir.is_dir() or layout.weft_dir.is_symlink()
    if root.is_relative_to(base) and (new or not layout.meta_path.exists()):
        raise ExecutionSetupError(
            f"{root} is inside the managed root {base}, where Weft creates executions itself; "
            "there --execution can only resume an existing one. Drop --execution "
            "(add --new for a fresh one), or choose a directory outside the managed root"
        )
    if not new and has_weft:
        if layout.meta_path.exists():
            meta = read_meta(layout.meta_path)
            return _resume(layout, meta, ctx, data_given=ctx.data_path is not None)
        if not _has_state(layout):
            # A .weft/ without metadata or state: a creation that was interrupted.
            return _create(root, ctx)
        raise ExecutionMetaError(
            f"{layout.meta_path}: missing, but {layout.weft_dir} holds state. Restore the file, "
            f"or start over with `weft run --execution {root} --new --force` (the old .weft/ is "
            "kept as .weft.backup-<time>/)"
        )
    backup: Path | None = None
    if new and has_weft:
        if not ctx.force:
            raise ExecutionSetupError(
                f"{root} already holds an execution. To start a new one there, add --force: "
                f"its .weft/ (and agentRoot/, rigArchive/) move to {root}/.weft.backup-<time>/, "
                "nothing is deleted. Or drop --new to resume it"
            )
        holder = live_holder(layout.weft_dir)
        if holder is not None:
            # Moving .weft/ away would leave that process writing into the backup.
            raise LockHeldError(
                f"Weft is running on {root} (PID {holder.pid}); --new --force does not move a "
                "live execution away. Stop that run first (Ctrl-C or SIGTERM), then start again"
            )
        backup = _set_aside(layout, keep_workspace=keep_workspace)
        ctx.warnings.append(f"the previous execution in {root} was moved to {backup}")
    elif root.is_dir():
        entries = list(root.iterdir())
        if entries:
            dirs = sum(1 for p in entries if p.is_dir() and not p.is_symlink())
            what = f"{root} is not empty ({len(entries) - dirs} files, {dirs} folders)"
            ctx.confirm(
                f"{what} and is not a Weft execution. Create an execution in it? "
                "Its contents are left alone.",
                refusal=(
                    f"{what} and is not a Weft execution; refusing to create one in it in "
                    "non-interactive mode. Pass --yes to use it anyway, or choose an empty or "
                    "new directory"
                ),
                declined=f"{what}; not creating an execution in it",
                error=ExecutionSetupError,
            )
    prepared = _create(root, ctx)
    if backup is None:
        return prepared
    return dataclasses.replace(prepared, backup=backup)


def _has_state(layout: ExecutionLayout) -> bool:
    """Whether ``.weft/`` holds anything besides the empty folders of a fresh layout."""
    for entry in layout.weft_dir.iterdir():
        if entry.name in ("runs", "logs", "checkpoints") and entry.is_dir():
            if any(entry.iterdir()):
                return True
        elif not (entry.name.startswith(META_FILE) and entry.name.endswith(TEMP_SUFFIX)):
            return True
    return False


def _set_aside(layout: ExecutionLayout, *, keep_workspace: bool) -> Path:
    stamp = backup_stamp()
    backup = layout.root / f"{WEFT_DIR}.backup-{stamp}"
    n = 1
    while backup.exists() or backup.is_symlink():
        backup = layout.root / f"{WEFT_DIR}.backup-{stamp}-{n}"
        n += 1
    os.rename(layout.weft_dir, backup)
    if not keep_workspace:
        for path in (layout.workspace, layout.rig_archive):
            if path.exists() or path.is_symlink():
                os.rename(path, backup / path.name)
    return backup


def _find_resumable(base: Path, ctx: _Context) -> tuple[ExecutionLayout, ExecutionMeta] | None:
    if not base.is_dir():
        return None
    data_hash = ctx.data_hash
    best: tuple[tuple[str, str, str], ExecutionLayout, ExecutionMeta] | None = None
    for child in base.iterdir():
        layout = ExecutionLayout(child)
        if not layout.meta_path.is_file():
            continue
        try:
            meta = read_meta(layout.meta_path)
        except ExecutionMetaError:
            ctx.warnings.append(
                f"skipped {child}: its {WEFT_DIR}/{META_FILE} is unreadable (resume it with "
                f"--execution {child} to see why)"
            )
            continue
        if meta.hank_path != str(ctx.hank_path):
            continue
        if meta.data_hash != data_hash.value or meta.data_hash_mode != data_hash.mode:
            continue
        key = (meta.last_used, meta.created_at, child.name)
        if best is None or key > best[0]:
            best = (key, layout, meta)
    return None if best is None else (best[1], best[2])


def _new_managed_root(base: Path, data_hash: DataHash) -> Path:
    if not base.exists():
        private_folder(base)  # an existing base (one the user named) keeps its mode
    while True:
        root = base / f"{int(time.time() * 1000)}-{secrets.token_hex(2)}-{data_hash.short}"
        try:
            root.mkdir(mode=folder_mode())
        except FileExistsError:
            continue
        return private_folder(root)  # the mode again, past the umask


def _create(root: Path, ctx: _Context) -> PreparedExecution:
    layout = ExecutionLayout(root)
    data_hash = ctx.data_hash
    layout.create_dirs()
    park_data(layout)  # a kept or foreign workspace may hold an old data slot
    link_type = link_data(layout, ctx.data_path, copy=ctx.copy, warnings=ctx.warnings)
    now = utc_now_iso()
    data = ctx.data_path
    meta = ExecutionMeta(
        version=META_VERSION,
        created_at=now,
        last_used=now,
        hank_path=str(ctx.hank_path),
        hank_hash=ctx.hank_hash,
        read_only_source_data_path=None if data is None else str(data),
        read_only_source_resolved_data_path=None if data is None else str(data.resolve()),
        data_kind=None if data is None else ("directory" if data.is_dir() else "file"),
        data_hash=data_hash.value,
        data_hash_mode=data_hash.mode,
        link_type=link_type,
        weft_version=weft_version(),
        environment=current_environment(),
        run_settings=ctx.asked,
    )
    # Written last: a crash before this leaves a .weft/ without metadata,
    # which the next attempt recognises as an unfinished creation.
    write_meta(layout.meta_path, meta)
    return PreparedExecution(
        layout=layout,
        meta=meta,
        resumed=False,
        hank_path=ctx.hank_path,
        data_path=data,
        warnings=tuple(ctx.warnings),
        settings=ctx.asked,
    )


def _resume(
    layout: ExecutionLayout, meta: ExecutionMeta, ctx: _Context, *, data_given: bool
) -> PreparedExecution:
    """Resumes ``layout``: the hank confirmed, the data checked and relinked as needed,
    the metadata updated."""
    settings, follow_model = _check_settings(layout, meta, ctx)
    hank_changed = _check_hank(layout, meta, ctx)
    updates: dict[str, Any] = {}
    data_path: Path | None
    if data_given:
        data_path, updates = _adopt_given_data(layout, meta, ctx)
    else:
        data_path = _keep_recorded_data(layout, meta, ctx)
    layout.create_dirs()
    meta = msgspec.structs.replace(
        meta,
        last_used=utc_now_iso(),
        hank_path=str(ctx.hank_path),
        hank_hash=ctx.hank_hash,
        run_settings=settings,
        **updates,
    )
    write_meta(layout.meta_path, meta)
    return PreparedExecution(
        layout=layout,
        meta=meta,
        resumed=True,
        hank_path=ctx.hank_path,
        data_path=data_path,
        hank_changed=hank_changed or follow_model,
        warnings=tuple(ctx.warnings),
        settings=settings,
        notes=tuple(ctx.notes),
    )


def _check_hank(layout: ExecutionLayout, meta: ExecutionMeta, ctx: _Context) -> bool:
    """Whether the hank changed since the execution last ran it; a change must be
    confirmed (:meth:`_Context.confirm` raises :class:`HankChangedError` otherwise)."""
    root, execution = layout.root, layout.execution_id
    hank_changed = meta.hank_hash != ctx.hank_hash
    if hank_changed:
        _check_structure(layout, ctx)
        ctx.confirm(
            f"{ctx.hank_path} has changed since execution {execution} last ran it. "
            "Resume the execution with the changed hank?",
            refusal=(
                f"{ctx.hank_path} does not match the hank recorded for execution {execution} "
                f"({root}); refusing to resume in non-interactive mode. Pass --yes to resume "
                "with the changed hank, or --new to start a new execution"
            ),
            declined=(
                f"{ctx.hank_path} changed since execution {execution} last ran it and resuming "
                "was declined; run with --new to start a new execution"
            ),
            error=HankChangedError,
        )
        ctx.warnings.append(
            f"the hank changed since execution {execution} last ran it; resuming with the "
            "changed hank"
        )
    elif meta.hank_path != str(ctx.hank_path):
        ctx.warnings.append(
            f"execution {execution} was made for {meta.hank_path}; it now runs "
            f"{ctx.hank_path} (same content)"
        )
    return hank_changed


@dataclass(frozen=True, slots=True)
class _Ran:
    """What an execution's state says about its codons, for the settings check."""

    models: dict[str, str]
    """Codon id -> the model its stored plan entry runs on, in plan order."""
    finished: set[str]
    """The ids of the codons that finished (completed or skipped) in any run."""
    complete: bool
    """The newest run completed and every planned codon finished: nothing is left."""

    def models_of(self, ids: Iterable[str]) -> str:
        """The models the codons ``ids`` run on, in words."""
        return ", ".join(dict.fromkeys(self.models[i] for i in ids)) or "their own models"

    @property
    def left(self) -> list[str]:
        """The planned codons not yet finished."""
        return [i for i in self.models if i not in self.finished]


def _stored_state(layout: ExecutionLayout) -> dict[str, Any] | None:
    """The execution's state (snapshot and journal tail, read-only); state.json alone
    when the store cannot be read here (the run reports why); None without either."""
    if (layout.weft_dir / DATABASE).is_file():
        try:
            store = ExecutionStore.open(layout.root, readonly=True)
        except (WeftError, OSError, sqlite3.Error):
            pass
        else:
            try:
                state: dict[str, Any] = msgspec.json.decode(store.core.state_json())
            finally:
                store.journal.close()
            return state
    try:
        decoded = msgspec.json.decode((layout.weft_dir / "state.json").read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _what_ran(layout: ExecutionLayout) -> _Ran | None:
    """What ran in the execution, or None when no run started yet."""
    state = _stored_state(layout)
    if state is None:
        return None
    runs = state.get("runs") or []
    if not isinstance(runs, list) or not runs:
        return None
    models: dict[str, str] = {}
    for entry in state.get("executionPlan") or ():
        try:
            models[str(entry["codonId"])] = str(entry["codon"]["model"])
        except (KeyError, TypeError):
            continue
    finished = finished_ids(state)
    newest = runs[0] if isinstance(runs[0], dict) else {}
    complete = newest.get("status") == "completed" and all(i in finished for i in models)
    return _Ran(models, finished, complete)


def _check_settings(
    layout: ExecutionLayout, meta: ExecutionMeta, ctx: _Context
) -> tuple[RunSettings, bool]:
    """The run-shaping settings in force for this resume, and whether the run must
    follow the model in force (the stored plan runs codons not yet run on another).

    A setting not given now is the one kept with the execution. A different model
    or sentinel model than the execution ran with is a change to confirm
    (:meth:`_Context.confirm`, raising :class:`RunSettingsChangedError`); a
    different ceiling replaces the kept one. Sets ``ctx.hank`` to the hank as
    loaded with the model in force.
    """
    kept, asked, names = meta.run_settings, ctx.asked, ctx.names
    execution = layout.execution_id
    settings = RunSettings(
        model=asked.model or kept.model,
        sentinel_model=asked.sentinel_model or kept.sentinel_model,
        max_dollars=asked.max_dollars if asked.max_dollars is not None else kept.max_dollars,
        max_seconds=asked.max_seconds if asked.max_seconds is not None else kept.max_seconds,
        max_tokens=asked.max_tokens if asked.max_tokens is not None else kept.max_tokens,
    )
    ran = _what_ran(layout)
    if asked.model is not None and ran is not None:
        planned = set(ran.models.values())
        if ran.complete:
            # What ran is all there is: a change only when it ran on another model.
            changed = bool(planned - {asked.model})
        else:
            changed = asked.model != kept.model if kept.model else bool(planned - {asked.model})
        if changed:
            was = ran.models_of(ran.models) if ran.complete or not kept.model else kept.model
            _confirm_model(layout, ctx, ran, was=was, now=asked.model)
    if (
        asked.sentinel_model is not None
        and asked.sentinel_model != kept.sentinel_model
        and ran is not None
        and _has_sentinels(ctx.hank)
    ):
        name = names["sentinel_model"]
        was = kept.sentinel_model or "the models the hank gives them"
        ctx.confirm(
            f"Execution {execution} ran its sentinels on {was}; {name} asks for "
            f"{asked.sentinel_model}. Run the sentinels of the codons not yet run on "
            f"{asked.sentinel_model}?",
            refusal=(
                f"{name} {asked.sentinel_model} differs from the sentinel model execution "
                f"{execution} ({layout.root}) ran with ({was}); refusing to resume in "
                f"non-interactive mode. Choose: --yes to run the sentinels of the codons not yet "
                f"run on {asked.sentinel_model}, --new to run the hank with it in a new "
                f"execution, or drop {name} to resume with {was}"
            ),
            declined=(
                f"{name} {asked.sentinel_model} was declined; run with --new to use it in a "
                f"new execution, or drop {name} to resume with {was}"
            ),
            error=RunSettingsChangedError,
        )
        ctx.notes.append(
            f"sentinels now run on {asked.sentinel_model} ({name}; was {was}), kept with "
            f"execution {execution}"
        )
    elif asked.sentinel_model is None and kept.sentinel_model is not None:
        ctx.notes.append(
            f"sentinels run on {kept.sentinel_model}, kept with execution {execution} "
            f"(--sentinel-model changes it)"
        )
    for field_name, unit in (("max_dollars", "$"), ("max_seconds", "s"), ("max_tokens", "tokens")):
        now, before = getattr(asked, field_name), getattr(kept, field_name)
        flag = names[field_name]
        if now is not None and before is not None and now != before:
            ctx.notes.append(
                f"{flag} {_amount(now, unit)} replaces the {_amount(before, unit)} kept with "
                f"execution {execution}"
            )
        elif now is None and before is not None:
            ctx.notes.append(
                f"{flag} {_amount(before, unit)} is kept with execution {execution} from an "
                f"earlier run ({flag} changes it)"
            )
    if ctx.load_hank is not None and settings.model != asked.model:
        try:
            ctx.hank = ctx.load_hank(settings.model)
        except ConfigError as exc:
            why = exc.problems[0].message if exc.problems else str(exc)
            raise ExecutionMetaError(
                f"{layout.meta_path}: runSettings.model {settings.model!r}, kept with the "
                f"execution, cannot run this hank ({why}). Pass another with "
                f"{names['model']} MODEL --yes, or fix the file"
            ) from None
    follow = False
    if settings.model is not None and ran is not None:
        follow = any(ran.models[i] != settings.model for i in ran.left)
        if asked.model is None:
            ctx.notes.append(
                f"codons run on {settings.model}, kept with execution {execution} "
                f"({names['model']} changes it)"
            )
    return settings, follow


def _amount(value: float, unit: str) -> str:
    if unit == "tokens":
        return f"{int(value):,} tokens"
    return f"${value:g}" if unit == "$" else f"{value:g}s"


def _has_sentinels(hank: Hank | None) -> bool:
    """Whether any codon of ``hank`` has sentinels (True without a hank: unknown)."""
    if hank is None:
        return True
    for item in hank.hank:
        codons = item.codons if isinstance(item, Loop) else [item]
        if any(codon.sentinels for codon in codons):
            return True
    return False


def _confirm_model(
    layout: ExecutionLayout, ctx: _Context, ran: _Ran, *, was: str, now: str
) -> None:
    """A model other than the one the execution ran on: confirmed, or refused."""
    execution, name = layout.execution_id, ctx.names["model"]
    if ran.complete:
        ctx.confirm(
            f"Execution {execution} is complete: its codons ran on {was}, and none is left "
            f"to run on {now}. Resume it anyway (nothing runs; {now} is kept with it)?",
            refusal=(
                f"execution {execution} ({layout.root}) is complete: its codons ran on {was}, "
                f"and none is left to run on {now} ({name}). Add --new to run the hank on "
                f"{now} in a new execution, or drop {name} (nothing to do)"
            ),
            declined=f"add --new to run the hank on {now} in a new execution",
            error=RunSettingsChangedError,
        )
        ctx.notes.append(
            f"execution {execution} is complete: no codon is left to run on {now} "
            f"({name}; add --new to run the hank on it)"
        )
        return
    ctx.confirm(
        f"Execution {execution} runs on {was}; {name} asks for {now}. Run the codons not yet "
        f"run on {now} (the ones that finished keep their results)?",
        refusal=(
            f"{name} {now} differs from the model execution {execution} ({layout.root}) runs "
            f"on ({was}); refusing to resume in non-interactive mode. Choose: --yes to run "
            f"the codons not yet run on {now} (the ones that finished keep their results), "
            f"--new to run the whole hank on {now} in a new execution, or drop {name} to "
            f"resume on {was}"
        ),
        declined=(
            f"{name} {now} was declined; run with --new to run the hank on {now} in a new "
            f"execution, or drop {name} to resume on {was}"
        ),
        error=RunSettingsChangedError,
    )
    ctx.notes.append(
        f"the codons not yet run now run on {now} ({name}; was {was}), kept with "
        f"execution {execution}"
    )


def _structure_of_plan(layout: ExecutionLayout) -> list[str] | None:
    """The top-level items the execution's stored plan runs, in order (``loop <id>`` for
    a loop's entries), or None when no plan was stored yet or state.json is unreadable."""
    try:
        state = msgspec.json.decode((layout.weft_dir / "state.json").read_bytes())
        entries = state["executionPlan"]
    except (OSError, msgspec.DecodeError, KeyError, TypeError):
        return None
    items: list[str] = []
    for entry in entries or ():
        loop = (entry.get("loopContext") or {}).get("loopId")
        item = f"loop {loop}" if loop else str(entry.get("codonId"))
        if not items or items[-1] != item:
            items.append(item)
    return items or None


def _structure_of_hank(path: Path) -> list[str] | None:
    try:
        doc = msgspec.json.decode(path.read_bytes())
        return [
            f"loop {item['id']}" if item.get("type") == "loop" else str(item["id"])
            for item in doc["hank"]
        ]
    except (OSError, msgspec.DecodeError, KeyError, TypeError, AttributeError):
        return None


def _check_structure(layout: ExecutionLayout, ctx: _Context) -> None:
    """Refuses (even with ``--yes``) a changed hank the execution cannot follow: with
    the loaded hank, one whose part that already ran changed (:mod:`weft.runtime.run.replan`);
    without it, one whose codons or loops differ from the stored plan."""
    if ctx.hank is not None:
        try:
            state = msgspec.json.decode((layout.weft_dir / "state.json").read_bytes())
        except (OSError, msgspec.DecodeError):
            return  # no run yet (or a damaged state, which the run reports)
        try:
            replan(state, ctx.hank)
        except PrefixChangedError as exc:
            raise HankChangedError(
                f"{ctx.hank_path} changed what execution {layout.execution_id} already ran: "
                f"{exc}. An execution resumes with a changed hank only when the codons that "
                "ran are unchanged (codons after them may be added, removed or edited). "
                "Choose: --reuse to fork it at the first codon that changed (the codons "
                "before it are reused, not run again), run the changed hank in a new "
                "execution (--new), or restore the codons that ran to resume this one",
                execution=layout.root,
            ) from None
        return
    was, now = _structure_of_plan(layout), _structure_of_hank(ctx.hank_path)
    if was is None or now is None or was == now:
        return
    added = [item for item in now if item not in was]
    removed = [item for item in was if item not in now]
    what = "; ".join(
        part
        for part in (
            f"added {', '.join(added)}" if added else "",
            f"removed {', '.join(removed)}" if removed else "",
            "" if added or removed else "the order changed",
        )
        if part
    )
    raise HankChangedError(
        f"{ctx.hank_path} changed its codons since execution {layout.execution_id} last ran it: "
        f"{what} (was: {', '.join(was)}; now: {', '.join(now)}). An execution resumes only with "
        "the codons its plan holds. Choose: run the changed hank in a new execution (--new), "
        "or restore the hank's codons to resume this one"
    )


def _adopt_given_data(
    layout: ExecutionLayout, meta: ExecutionMeta, ctx: _Context
) -> tuple[Path, dict[str, Any]]:
    """A resume with data given: the data must match the recorded hash (or ``--force``
    relinks it); returns the data path and the metadata fields to update."""
    root, execution = layout.root, layout.execution_id
    data_path = ctx.data_path
    assert data_path is not None
    data_hash = ctx.data_hash
    recorded = meta.read_only_source_data_path
    same = meta.data_hash == data_hash.value and meta.data_hash_mode == data_hash.mode
    if not same:
        if not ctx.force:
            raise DataMismatchError(
                f"execution {execution} ({root}) was created with "
                f"{recorded or 'no data'}, whose contents differ from {data_path}. Pass "
                "--force to relink the execution to the new data, --new --force to start a "
                f"new execution in {root}, or drop --execution to let Weft pick or create "
                "the execution that matches"
            )
        ctx.warnings.append(
            f"execution {execution} now uses {data_path} instead of "
            f"{recorded or 'no data'} (--force)"
        )
    elif recorded != str(data_path):
        ctx.warnings.append(
            f"execution {execution} now uses {data_path} (same contents as {recorded})"
        )
    updates: dict[str, Any] = {}
    stale_link = meta.link_type == "symlink" and not link_intact(layout, data_path)
    if not same or stale_link or meta.link_type == "none":
        park_data(layout)
        updates["link_type"] = link_data(layout, data_path, copy=ctx.copy, warnings=ctx.warnings)
    updates.update(
        read_only_source_data_path=str(data_path),
        read_only_source_resolved_data_path=str(data_path.resolve()),
        data_kind="directory" if data_path.is_dir() else "file",
        data_hash=data_hash.value,
        data_hash_mode=data_hash.mode,
    )
    return data_path, updates


def _keep_recorded_data(layout: ExecutionLayout, meta: ExecutionMeta, ctx: _Context) -> Path | None:
    """A resume without data: the recorded data, relinked when its link broke."""
    recorded = meta.read_only_source_data_path
    data_path = None if recorded is None else Path(recorded)
    if data_path is not None and meta.link_type == "symlink":
        if not data_path.exists():
            raise DataMismatchError(
                f"execution {layout.execution_id} links to its data at {data_path}, which no "
                f"longer exists; pass the data again: weft run {ctx.hank_path} <data> "
                f"--execution {layout.root} (add --force if its contents changed)"
            )
        if not link_intact(layout, data_path):
            park_data(layout)
            link_data(layout, data_path, copy=False, warnings=ctx.warnings)
            ctx.warnings.append(f"relinked {layout.data_link} to {data_path}")
    return data_path
