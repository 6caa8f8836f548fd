"""Execution directories: which one ``weft run`` uses, and making it ready.

An *execution* is a directory holding one hank's work on one data set,
across any number of runs::

    <execution>/
      agentRoot/                   the agent's working directory (workspace)
        read_only_data_source      the data: a symlink (or a copy); a file input
                                   lives under it as <basename>
      rigArchive/                  paths archived by archiveOnSuccess
      .weft/                       Weft's own state
        execution-meta.json        which hank and data this execution belongs to
        runs/ logs/ checkpoints/   (state.json, weft.db, runtime.lock: weft.store)

:func:`resolve_inputs` turns the positional arguments into a hank and a data
path; :func:`prepare_execution` decides between creating and resuming and
returns a :class:`PreparedExecution`. The rules, in order:

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
(:class:`HankChangedError`). Everything here blocks (hashing, copying,
fsync): async callers run it in ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import platform
import secrets
import select
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import msgspec
import orjson

from weft.checkpoints.storage import checkpoint_git_dir
from weft.clock import utc_now_iso
from weft.errors import LockHeldError, WeftError
from weft.store.diskspace import STORAGE_ERRNOS, storage_error
from weft.store.execution import live_holder

__all__ = [
    "BASE_DIR_ENV",
    "CI_ENV_VARS",
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
    "InputPathError",
    "PreparedExecution",
    "ask_yes_no",
    "hank_hash",
    "hash_data",
    "is_interactive",
    "managed_base_dir",
    "prepare_execution",
    "read_meta",
    "resolve_inputs",
    "write_meta",
]

HANK_FILE = "hank.json"
WEFT_DIR = ".weft"
WORKSPACE = "agentRoot"
DATA_LINK = "read_only_data_source"
RIG_ARCHIVE = "rigArchive"
META_FILE = "execution-meta.json"
META_VERSION = "1.0.0"
BASE_DIR_ENV = "WEFT_RUNTIME_EXECUTION_BASE_DIR"
DEFAULT_BASE_DIR = "~/.weft-executions"
DEFAULT_DATA_HASH_TIME_LIMIT = 5.0
"""Seconds spent reading data contents before falling back to a metadata hash
(the reference's ``dataHashTimeLimit``, 5000 ms; ``overrides.dataHashTimeLimit``)."""
PROMPT_TIMEOUT = 30.0
"""Seconds a [y/N] question waits before it counts as "no"."""
CI_ENV_VARS = (
    "CI",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "CIRCLECI",
    "TRAVIS",
    "BUILDKITE",
    "TF_BUILD",
)
"""Variables whose presence means a CI job, where nobody answers a prompt.
Any ``JENKINS*`` variable counts too."""
_TEMP_SUFFIX = ".tmp"
"""``execution-meta.json.<pid>-<random>.tmp``: a metadata write in progress."""
_FALSE_VALUES = frozenset({"", "0", "false", "no", "off"})
_HASH_CHUNK = 1 << 20


# --------------------------------------------------------------------------- errors


class ExecutionSetupError(WeftError):
    """The execution directory cannot be created or resumed as asked.

    The message says what is wrong, where, and which flag or action fixes it;
    nothing has been deleted.
    """


class InputPathError(ExecutionSetupError):
    """The hank or data arguments do not name usable paths (a usage error)."""


class ExecutionMetaError(ExecutionSetupError):
    """``.weft/execution-meta.json`` is missing where it must exist, or unreadable."""


class HankChangedError(ExecutionSetupError):
    """The hank changed since the execution last used it, and resuming was not confirmed."""


class DataMismatchError(ExecutionSetupError):
    """The data given differs from the data the execution was created with."""


# --------------------------------------------------------------------------- inputs


def resolve_inputs(args: list[str], *, cwd: Path | None = None) -> tuple[Path, Path | None]:
    """The hank file and the data path (or ``None``) named by ``weft run``'s positionals.

    * no argument: ``./hank.json``, no data;
    * one argument: a path ending in ``.json``, or a directory that contains a
      ``hank.json``, is the hank (no data); anything else is the data, run
      with ``./hank.json``;
    * two arguments: the hank (a ``.json`` file or a directory holding a
      ``hank.json``), then the data (a file or a directory).

    Both paths must exist; they are returned absolute with symlinks resolved.
    Raises :class:`InputPathError` with what was expected otherwise.
    """
    base = (cwd or Path.cwd()).absolute()
    if len(args) > 2:
        raise InputPathError(
            f"too many positional arguments: expected at most 2 (hank, data), got {len(args)}"
        )
    for arg in args:
        if arg == "-":
            raise InputPathError("reading data from stdin ('-') is not supported; pass a path")
        if not arg:
            raise InputPathError("an empty path was given; pass a hank file or a data path")
    if not args:
        return _default_hank(base, None), None
    if len(args) == 2:
        return _hank_file(base / args[0], args[0]), _data_path(base / args[1], args[1])
    only = base / args[0]
    if args[0].endswith(".json") or (only.is_dir() and (only / HANK_FILE).is_file()):
        return _hank_file(only, args[0]), None
    if not only.exists():
        raise InputPathError(
            f"{args[0]}: no such file or directory (expected a hank .json file, a folder "
            f"containing {HANK_FILE}, or the data to run ./{HANK_FILE} on)"
        )
    return _default_hank(base, args[0]), _data_path(only, args[0])


def _default_hank(base: Path, data_arg: str | None) -> Path:
    path = base / HANK_FILE
    if path.is_file():
        return path.resolve()
    if data_arg is None:
        raise InputPathError(
            f"no {HANK_FILE} in {base}; pass the hank: weft run path/to/hank.json [data]"
        )
    raise InputPathError(
        f"{data_arg} is not a hank (not a .json file, no {HANK_FILE} inside), so it was taken "
        f"as the data, but there is no {HANK_FILE} in {base} to run on it; "
        f"pass both: weft run path/to/hank.json {data_arg}"
    )


def _hank_file(path: Path, arg: str) -> Path:
    if path.is_dir():
        candidate = path / HANK_FILE
        if not candidate.is_file():
            raise InputPathError(f"{arg}: the folder has no {HANK_FILE}; pass the hank file itself")
        return candidate.resolve()
    if not path.exists():
        raise InputPathError(f"{arg}: hank file not found")
    if not path.is_file():
        raise InputPathError(f"{arg}: not a regular file; pass the hank .json file")
    return path.resolve()


def _data_path(path: Path, arg: str) -> Path:
    if not path.exists():
        raise InputPathError(f"{arg}: data not found (pass an existing file or folder)")
    if not (path.is_dir() or path.is_file()):
        raise InputPathError(f"{arg}: the data must be a regular file or a folder")
    return path.resolve()


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True, slots=True)
class ExecutionLayout:
    """The paths of one execution directory (nothing is touched by building it)."""

    root: Path

    @property
    def execution_id(self) -> str:
        """The directory's name, which identifies the execution."""
        return self.root.name

    @property
    def workspace(self) -> Path:
        """``agentRoot/``: the agent's working directory."""
        return self.root / WORKSPACE

    @property
    def data_link(self) -> Path:
        """``agentRoot/read_only_data_source``: the linked (or copied) data."""
        return self.workspace / DATA_LINK

    @property
    def rig_archive(self) -> Path:
        """``rigArchive/``: paths moved away by ``archiveOnSuccess``."""
        return self.root / RIG_ARCHIVE

    @property
    def weft_dir(self) -> Path:
        """``.weft/``: Weft's state for this execution."""
        return self.root / WEFT_DIR

    @property
    def runs(self) -> Path:
        """``.weft/runs/``: per-run agent transcripts."""
        return self.weft_dir / "runs"

    @property
    def logs(self) -> Path:
        """``.weft/logs/``: server and session logs."""
        return self.weft_dir / "logs"

    @property
    def checkpoints(self) -> Path:
        """``.weft/checkpoints/.weftcheckpoints``: the shadow git repository."""
        return checkpoint_git_dir(self.weft_dir)

    @property
    def meta_path(self) -> Path:
        """``.weft/execution-meta.json``."""
        return self.weft_dir / META_FILE

    def create_dirs(self) -> None:
        """Creates every directory of the layout that is missing (the checkpoint
        repository makes its own folder, atomically, when it is first opened)."""
        for path in (self.workspace, self.rig_archive, self.runs, self.logs):
            path.mkdir(parents=True, exist_ok=True)


# --------------------------------------------------------------------------- metadata


class ExecutionEnvironment(msgspec.Struct, rename="camel", kw_only=True):
    """Where the execution was created (for bug reports, never for decisions)."""

    platform: str
    arch: str
    os_release: str
    python: str


class ExecutionMeta(msgspec.Struct, rename="camel", kw_only=True):
    """``.weft/execution-meta.json``: the hank and data an execution belongs to.

    Field names follow the reference runtime's file where they exist.
    ``dataHashMode`` says how ``dataHash`` was computed (see :func:`hash_data`);
    two hashes only match when the modes match too. Unknown fields are
    tolerated so that a newer minor version can still be read.
    """

    version: str
    created_at: str
    last_used: str
    hank_path: str
    hank_hash: str
    read_only_source_data_path: str | None
    read_only_source_resolved_data_path: str | None
    data_kind: Literal["directory", "file"] | None
    data_hash: str
    data_hash_mode: Literal["content", "metadata", "none"]
    link_type: Literal["symlink", "copy", "none"]
    weft_version: str
    environment: ExecutionEnvironment


_meta_encoder = msgspec.json.Encoder()
_meta_decoder = msgspec.json.Decoder(ExecutionMeta)


def read_meta(path: Path) -> ExecutionMeta:
    """Reads an ``execution-meta.json``; :class:`ExecutionMetaError` if it is unusable."""
    root = path.parent.parent
    fix = (
        f"Fix the file by hand, or start a new execution in that folder with "
        f"`weft run --execution {root} --new --force` (the old .weft/ is kept as "
        f".weft.backup-<time>/)."
    )
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ExecutionMetaError(f"{path}: missing. {fix}") from None
    except OSError as e:
        raise ExecutionMetaError(f"{path}: cannot be read ({e.strerror}). {fix}") from None
    try:
        meta = _meta_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise ExecutionMetaError(f"{path}: not a valid execution-meta.json ({e}). {fix}") from None
    major = meta.version.split(".", 1)[0]
    if major != META_VERSION.split(".", 1)[0]:
        raise ExecutionMetaError(
            f"{path}: version {meta.version} is not supported by this Weft (it reads "
            f"{META_VERSION.split('.', 1)[0]}.x); use the Weft that created it, or {fix[0].lower()}"
            f"{fix[1:]}"
        )
    return meta


def write_meta(path: Path, meta: ExecutionMeta) -> None:
    """Writes ``meta`` atomically: a temp file, fsync, rename, fsync of the folder.

    The temp file's name is unique to this call, so two processes writing at
    once never rename each other's half-written file; a failed write removes
    it. A full disk raises :class:`~weft.errors.StorageFullError` naming the file.
    """
    data = msgspec.json.format(_meta_encoder.encode(meta), indent=2)
    temp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}{_TEMP_SUFFIX}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data + b"\n")
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as e:
        with contextlib.suppress(OSError):
            temp.unlink()
        if e.errno in STORAGE_ERRNOS:
            raise storage_error(str(path), e) from e
        raise


def _environment() -> ExecutionEnvironment:
    return ExecutionEnvironment(
        platform=sys.platform,
        arch=platform.machine(),
        os_release=platform.release(),
        python=platform.python_version(),
    )


def _weft_version() -> str:
    try:
        from weft._core import __version__
    except ImportError:  # pragma: no cover - the extension is always built in practice
        return "unknown"
    return str(__version__)


# --------------------------------------------------------------------------- hashes


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


# --------------------------------------------------------------------------- interaction


def is_interactive(
    *,
    headless: bool = False,
    env: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> bool:
    """Whether a person can answer a prompt.

    Not when ``headless`` (an explicit flag), in CI (any of :data:`CI_ENV_VARS`
    or a ``JENKINS*`` variable set to something other than ``0``/``false``),
    or when stdin or stdout is not a terminal.
    """
    if headless:
        return False
    environ = os.environ if env is None else env
    for name, value in environ.items():
        if (name in CI_ENV_VARS or name.startswith("JENKINS")) and (
            value.strip().lower() not in _FALSE_VALUES
        ):
            return False
    streams = (stdin or sys.stdin, stdout or sys.stdout)
    try:
        return all(s is not None and s.isatty() for s in streams)
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def ask_yes_no(
    question: str,
    *,
    timeout: float = PROMPT_TIMEOUT,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> bool:
    """Asks ``question [y/N]``; only ``y``/``yes`` is yes. No answer in time is no."""
    source = stdin or sys.stdin
    sink = stdout or sys.stderr
    sink.write(f"{question} [y/N] ")
    sink.flush()
    ready, _, _ = select.select([source], [], [], timeout)
    if not ready:
        sink.write(f"\nno answer within {timeout:g} s: taken as no\n")
        sink.flush()
        return False
    return source.readline().strip().lower() in ("y", "yes")


Prompt = Callable[[str], bool]
"""Asks a yes/no question; ``True`` means yes."""


# --------------------------------------------------------------------------- preparation


@dataclass(frozen=True, slots=True)
class PreparedExecution:
    """An execution directory ready for a run.

    ``resumed`` is false for a new execution. ``hank_changed`` says the hank
    differs from the one the execution last ran (and resuming was confirmed).
    ``data_path`` is the data the workspace links to (taken from the metadata
    on a resume without data). ``backup`` is where ``--new --force`` moved the
    previous execution. ``warnings`` are for the user, one line each.
    """

    layout: ExecutionLayout
    meta: ExecutionMeta
    resumed: bool
    hank_path: Path
    data_path: Path | None
    hank_changed: bool = False
    backup: Path | None = None
    warnings: tuple[str, ...] = ()

    @property
    def execution_id(self) -> str:
        """The execution directory's name."""
        return self.layout.execution_id


def managed_base_dir(base_dir: Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The managed root: ``base_dir``, else ``$WEFT_RUNTIME_EXECUTION_BASE_DIR``,
    else ``~/.weft-executions``."""
    if base_dir is not None:
        return Path(base_dir).expanduser().resolve()
    value = (os.environ if env is None else env).get(BASE_DIR_ENV, "").strip()
    return Path(value or DEFAULT_BASE_DIR).expanduser().resolve()


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
    prompt: Prompt
    warnings: list[str] = field(default_factory=list)
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
        if not self.interactive:
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
) -> PreparedExecution:
    """Creates or resumes the execution for ``hank_path`` on ``data_path``.

    See the module docstring for the rules. ``interactive`` says whether a
    person can answer questions (:func:`is_interactive`); ``prompt`` asks
    them (default :func:`ask_yes_no`). ``copy`` copies the data instead of
    linking it. ``force`` also relinks an explicit execution to different
    data. ``data_hash_time_limit`` is in seconds (the hank's
    ``overrides.dataHashTimeLimit`` is in milliseconds). Raises
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
        prompt=prompt or ask_yes_no,
    )
    base = managed_base_dir(base_dir)
    if execution_dir is not None:
        root = Path(execution_dir).expanduser().absolute().resolve()
        _check_placement(root, data_path)
        if root.exists() and not root.is_dir():
            raise ExecutionSetupError(f"{root}: exists and is not a directory; choose another path")
        root.mkdir(parents=True, exist_ok=True)
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
        elif not (entry.name.startswith(META_FILE) and entry.name.endswith(_TEMP_SUFFIX)):
            return True
    return False


def _backup_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H-%M-%S")


def _set_aside(layout: ExecutionLayout, *, keep_workspace: bool) -> Path:
    stamp = _backup_stamp()
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
    base.mkdir(parents=True, exist_ok=True)
    while True:
        root = base / f"{int(time.time() * 1000)}-{secrets.token_hex(2)}-{data_hash.short}"
        try:
            root.mkdir()
        except FileExistsError:
            continue
        return root


def _create(root: Path, ctx: _Context) -> PreparedExecution:
    layout = ExecutionLayout(root)
    data_hash = ctx.data_hash
    layout.create_dirs()
    _park_data(layout)  # a kept or foreign workspace may hold an old data slot
    link_type = _link_data(layout, ctx.data_path, copy=ctx.copy, warnings=ctx.warnings)
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
        weft_version=_weft_version(),
        environment=_environment(),
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
    )


def _resume(
    layout: ExecutionLayout, meta: ExecutionMeta, ctx: _Context, *, data_given: bool
) -> PreparedExecution:
    root, execution = layout.root, layout.execution_id
    hank_changed = meta.hank_hash != ctx.hank_hash
    if hank_changed:
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
    updates: dict[str, Any] = {}
    data_path: Path | None
    if data_given:
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
        stale_link = meta.link_type == "symlink" and not _link_intact(layout, data_path)
        if not same or stale_link or meta.link_type == "none":
            _park_data(layout)
            updates["link_type"] = _link_data(
                layout, data_path, copy=ctx.copy, warnings=ctx.warnings
            )
        updates.update(
            read_only_source_data_path=str(data_path),
            read_only_source_resolved_data_path=str(data_path.resolve()),
            data_kind="directory" if data_path.is_dir() else "file",
            data_hash=data_hash.value,
            data_hash_mode=data_hash.mode,
        )
    else:
        recorded = meta.read_only_source_data_path
        data_path = None if recorded is None else Path(recorded)
        if data_path is not None and meta.link_type == "symlink":
            if not data_path.exists():
                raise DataMismatchError(
                    f"execution {execution} links to its data at {data_path}, which no longer "
                    f"exists; pass the data again: weft run {ctx.hank_path} <data> "
                    f"--execution {root} (add --force if its contents changed)"
                )
            if not _link_intact(layout, data_path):
                _park_data(layout)
                _link_data(layout, data_path, copy=False, warnings=ctx.warnings)
                ctx.warnings.append(f"relinked {layout.data_link} to {data_path}")
    layout.create_dirs()
    meta = msgspec.structs.replace(
        meta,
        last_used=utc_now_iso(),
        hank_path=str(ctx.hank_path),
        hank_hash=ctx.hank_hash,
        **updates,
    )
    write_meta(layout.meta_path, meta)
    return PreparedExecution(
        layout=layout,
        meta=meta,
        resumed=True,
        hank_path=ctx.hank_path,
        data_path=data_path,
        hank_changed=hank_changed,
        warnings=tuple(ctx.warnings),
    )


# --------------------------------------------------------------------------- data linking


def _link_target(layout: ExecutionLayout, data: Path) -> Path:
    return layout.data_link / data.name if data.is_file() else layout.data_link


def _link_intact(layout: ExecutionLayout, data: Path) -> bool:
    link = _link_target(layout, data)
    try:
        return link.is_symlink() and Path(os.readlink(link)) == data
    except OSError:
        return False


def _park_data(layout: ExecutionLayout) -> None:
    """Clears the data slot without deleting data: a link is removed, a copy is moved
    to ``.weft/replaced-data-<time>/``."""
    slot = layout.data_link
    if slot.is_symlink():
        slot.unlink()
        return
    if not slot.exists():
        return
    if slot.is_dir():
        children = list(slot.iterdir())
        if len(children) == 1 and children[0].is_symlink():  # a linked file input
            children[0].unlink()
            slot.rmdir()
            return
    layout.weft_dir.mkdir(parents=True, exist_ok=True)
    parked = layout.weft_dir / f"replaced-data-{_backup_stamp()}"
    n = 1
    while parked.exists():
        parked = layout.weft_dir / f"replaced-data-{_backup_stamp()}-{n}"
        n += 1
    os.rename(slot, parked)


def _link_data(
    layout: ExecutionLayout, data: Path | None, *, copy: bool, warnings: list[str]
) -> Literal["symlink", "copy", "none"]:
    """Links (or copies) ``data`` to ``agentRoot/read_only_data_source``.

    A folder becomes the slot itself; a file goes under it as ``<basename>``.
    A symlink is read-only by convention only (the agent is told so); a copy
    has its files' write permission removed. Symlinks that cannot be made
    (a filesystem without them) fall back to a copy.
    """
    if data is None:
        return "none"
    slot = layout.data_link
    if data.is_file():
        slot.mkdir(parents=True, exist_ok=True)
    target = _link_target(layout, data)
    if not copy:
        try:
            os.symlink(data, target, target_is_directory=data.is_dir())
        except OSError as e:
            warnings.append(
                f"could not symlink the data ({e.strerror}); it was copied to {slot} instead"
            )
        else:
            return "symlink"
    if data.is_dir():
        shutil.copytree(data, target, symlinks=True)
    else:
        shutil.copy2(data, target)
    _make_read_only(target)
    return "copy"


def _make_read_only(path: Path) -> None:
    write_bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    targets = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for p in targets:
        if not p.is_symlink():
            p.chmod(stat.S_IMODE(p.stat().st_mode) & ~write_bits)
