"""Rig setup: a codon's ``rigSetup`` operations, run in order before its agent starts.

:func:`run_rig` runs ``copy`` and ``command`` operations and returns a
:class:`RigResult`; it never raises for a failing operation (only for a
cancellation, and :class:`~weft.errors.StorageFullError` when a copy finds
the disk full: that ends the run, however the operation is configured).
What it guarantees:

**copy** ``{from, to}``: ``from`` is relative to the hank's folder and must
stay inside it: no absolute path, no ``..``, no symlink on the way, not the
folder itself, nothing inside ``.git``/``.weft``. ``to`` is relative to the
workspace (``agentRoot``) and must stay inside it: no absolute path, no
``..``, no ``.git``/``.weft`` component, not into ``read_only_data_source``,
and no symlink on the way (an existing symlink at a file's own target is
replaced, never written through). A copy whose target lies inside its source
(the execution inside the copied folder) or whose source lies inside its
target is refused before anything is written. A file is copied to exactly ``to``; a
folder is merged into ``to``. Modes and times are preserved. Inside a copied
folder:

* ``.git``, ``.weft`` and ``.weft.backup-*`` are never copied;
* the ignore rules are the hank folder's ``.gitignore`` when it has one, else
  the reference runtime's defaults ``node_modules/``, ``dist/``, ``*.log``;
  a ``.gitignore`` inside the copied tree adds rules for its own subtree,
  as in git (it is copied too). Patterns follow gitignore: ``!`` negation,
  ``/`` anchoring, trailing ``/`` for folders, ``*``, ``?``, ``[...]``, ``**``.
  The source named by ``from`` is always copied, even if a rule matches it;
* a symlink is recreated only when its target is relative and stays inside
  the copied folder; any other symlink, FIFO, socket or device fails the copy.

Ignored entries are reported in the operation result and as one ``info``
event. After a successful copy, ``to`` is ``lastCopied``. Copying runs in a
worker thread; a cancelled rig stops it at the next file and waits for it.

**command** ``{run, workingDirectory}``: ``/bin/sh -c run`` in the workspace,
or in ``lastCopied`` (its folder when it is a file), with ``env`` (default:
this process's environment), stdin from ``/dev/null``, in a new process
group. When the shell exits, whatever it left running in its group is
killed, so nothing from the rig outlives it (start a service with ``setsid``
to keep it). Each command's group is journaled (``process.started`` when it
starts, ``process.ended`` once it is gone) with a mark in its environment,
so the next ``weft run`` ends what a killed Weft left of it
(:mod:`weft.runtime.survivors`); the shell itself dies with Weft (Linux).
A command that outlives ``command_timeout`` gets SIGTERM, then SIGKILL after
``kill_grace``; a cancelled :func:`run_rig` does the same before it re-raises.

**Output** is streamed as ``rig.output`` events, ``{stream, line, lines,
commandIndex[, droppedLines][, codonId]}``, where ``line`` may hold several
lines joined by ``\\n`` (see :class:`OutputLimits`): lines of a stream are
coalesced for ``interval`` (100 ms), an event carries at most ``event_bytes``
(the newest lines win; the others are counted in ``droppedLines``), and after
``streamed_bytes`` per command only the latest line of each stream is sent,
once per ``trickle_interval``. So a command printing without pause costs the
journal about ``streamed_bytes`` (1 MiB) plus one line per stream per second,
and Weft reads a flood at pipe speed without decoding every line. The last
``tail_bytes`` of output are kept for the failure reason.

**Failures**: an operation fails with ``failureType`` ``command_failed``
(non-zero exit or a signal), ``timeout`` or ``other`` (a copy error, a
command that could not start). Each failure is emitted as
``rig.setup.failed`` ``{failureType, operationType, commandIndex, ignored,
message[, exitCode][, codonId]}``. With ``allowFailure`` (or
``ignore_failures``) the rig goes on; otherwise it stops and
:attr:`RigResult.failure` describes the operation, with
:attr:`RigResult.reason` ready for the codon's failure reason. Operation
numbers in messages count from 1; ``index``/``commandIndex`` from 0 (the
position in ``rigSetup``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import posixpath
import re
import shutil
import signal
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from weft.agents.process import die_with_parent
from weft.config.schema import CommandOp, CopyOp
from weft.errors import UnsafePathError
from weft.events.stream import (
    InfoEvent,
    ProcessEndedEvent,
    RigOutputEvent,
    RigSetupFailedEvent,
    StreamData,
)
from weft.paths import contains, inside
from weft.runtime.survivors import MARK_VAR, new_mark, started_event
from weft.store.diskspace import STORAGE_ERRNOS, storage_error
from weft.terminal import printable

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "DEFAULT_IGNORES",
    "KILL_GRACE",
    "Emit",
    "IgnoreRules",
    "OutputLimits",
    "RigOpResult",
    "RigResult",
    "run_rig",
]

DEFAULT_COMMAND_TIMEOUT = 1800.0
"""Seconds a rig command may run (generous: dependency installs can be slow)."""
KILL_GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL when a command is stopped."""
PIPE_GRACE = 2.0
"""After the shell exited and its group was killed, how long its pipes may stay
open (a process that left the group) before Weft stops reading them."""
DEFAULT_IGNORES = ("node_modules/", "dist/", "*.log")
"""Ignore rules of a copy when the hank folder has no ``.gitignore``."""
ALWAYS_EXCLUDED = frozenset({".git", ".weft"})
"""Names never copied (nor allowed in ``from`` or ``to``)."""
DATA_LINK = "read_only_data_source"
REASON_TAIL_LINES = 20
REASON_TAIL_CHARS = 2000
IGNORED_IN_EVENT = 20

Emit = Callable[[StreamData], object]
"""Where events go: ``emit(event)``, e.g. ``StateManager.emit`` with the run
and codon bound."""
FailureType = Literal["command_failed", "timeout", "other"]


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """How command output is turned into ``rig.output`` events."""

    interval: float = 0.1
    """Seconds over which a stream's lines are coalesced into one event."""
    event_bytes: int = 16 * 1024
    """Most text in one event; older lines of the window are dropped past it."""
    streamed_bytes: int = 1024 * 1024
    """Text streamed per command before only the latest line is sent."""
    trickle_interval: float = 1.0
    """Seconds between events once ``streamed_bytes`` is spent."""
    tail_bytes: int = 16 * 1024
    """Output kept (both streams, in arrival order) for the result."""
    line_bytes: int = 4096
    """Longer lines are cut into pieces of this size."""


@dataclass(frozen=True, slots=True)
class RigOpResult:
    """What one operation did.

    ``ok`` is false for a failure, also one that ``failure_ignored`` let
    pass. ``exit_code`` is the shell's (negative: killed by that signal).
    ``target`` is a copy's destination; ``cwd`` is a command's directory, or
    for a copy the directory ``lastCopied`` commands will run in (the target,
    or its folder when a file was copied).
    """

    index: int
    type: Literal["copy", "command"]
    label: str
    ok: bool
    duration: float
    failure_type: FailureType | None = None
    failure_ignored: bool = False
    message: str | None = None
    exit_code: int | None = None
    output_tail: str = ""
    target: Path | None = None
    cwd: Path | None = None
    files_copied: int = 0
    bytes_copied: int = 0
    ignored: tuple[str, ...] = ()

    def describe(self) -> str:
        """``command operation 2 ("npm ci")``."""
        return f"{self.type} operation {self.index + 1} ({self.label})"


@dataclass(frozen=True, slots=True)
class RigResult:
    """The outcome of a rig: every operation that ran, and the one that stopped it."""

    operations: tuple[RigOpResult, ...]
    failure: RigOpResult | None
    last_copied: Path | None
    duration: float

    @property
    def ok(self) -> bool:
        """True when no failure stopped the rig (ignored failures do not)."""
        return self.failure is None

    @property
    def command_count(self) -> int:
        """How many command operations ran."""
        return sum(1 for op in self.operations if op.type == "command")

    @property
    def ignored_failures(self) -> tuple[RigOpResult, ...]:
        """Failures that ``allowFailure``/``ignore_failures`` let pass."""
        return tuple(op for op in self.operations if op.failure_ignored)

    @property
    def reason(self) -> str | None:
        """The codon's failure reason, e.g. ``Rig setup failed at command operation 2
        ("npm ci"): exit code 1: <last lines of output>``."""
        op = self.failure
        if op is None:
            return None
        text = f"Rig setup failed at {op.describe()}: {op.message}"
        tail = _reason_tail(op.output_tail)
        return f"{text}: {tail}" if tail else text


def _reason_tail(output: str) -> str:
    lines = output.rstrip("\n").splitlines()[-REASON_TAIL_LINES:]
    text = "\n".join(lines)
    return text if len(text) <= REASON_TAIL_CHARS else "..." + text[-REASON_TAIL_CHARS:]


class _OpError(Exception):
    """An operation failed; the message is for the user."""


class _CopyCancelledError(Exception):
    """The rig was cancelled while a copy thread was running."""


# --------------------------------------------------------------------------- ignore rules


def _translate(pattern: str) -> str:
    """A gitignore glob (already stripped of ``!``, anchoring and trailing ``/``) as a regex
    over a relative POSIX path."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                after = i + 2
                if before_ok and after == n:
                    out.append(".*")
                    i = after
                    continue
                if before_ok and pattern.startswith("/", after):
                    out.append("(?:.*/)?")
                    i = after + 1
                    continue
                while i < n and pattern[i] == "*":
                    i += 1
                out.append("[^/]*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    dir_only: bool


def _parse_rule(line: str) -> _Rule | None:
    line = line.rstrip("\n").rstrip("\r")
    if not line.endswith("\\ "):
        line = line.rstrip(" ")
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    prefix = "" if anchored or line.startswith("**/") else "(?:.*/)?"
    return _Rule(re.compile(prefix + _translate(line) + r"\Z", re.DOTALL), negated, dir_only)


class IgnoreRules:
    """The rules of one ignore file, relative to its folder (``base``, POSIX,
    relative to the hank folder; ``""`` for the hank folder itself)."""

    __slots__ = ("base", "rules")

    def __init__(self, lines: Sequence[str], base: str = "") -> None:
        self.base = base
        self.rules = [r for r in map(_parse_rule, lines) if r is not None]

    def match(self, rel: str, is_dir: bool) -> bool | None:
        """``True`` ignored, ``False`` re-included, ``None`` no rule matched ``rel``
        (a path relative to the hank folder)."""
        if self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1 :]
        verdict: bool | None = None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                verdict = not rule.negated
        return verdict


def _ignored(stack: Sequence[IgnoreRules], rel: str, is_dir: bool) -> bool:
    verdict = False
    for rules in stack:  # deeper files come later and win, as in git
        found = rules.match(rel, is_dir)
        if found is not None:
            verdict = found
    return verdict


def _root_rules(hank_dir: Path) -> IgnoreRules:
    gitignore = hank_dir / ".gitignore"
    if gitignore.is_file() and not gitignore.is_symlink():
        return IgnoreRules(gitignore.read_text(errors="replace").splitlines())
    return IgnoreRules(DEFAULT_IGNORES)


# --------------------------------------------------------------------------- copy


def _always_excluded(name: str) -> bool:
    return name in ALWAYS_EXCLUDED or name.startswith(".weft.backup-")


def _clean_parts(raw: str, field: str) -> list[str]:
    if raw.startswith("/"):
        raise _OpError(f'"{field}" must be a relative path, got "{raw}"')
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _OpError(f'"{field}" may not contain "..", got "{raw}"')
    for part in parts:
        if _always_excluded(part):
            raise _OpError(f'"{field}" may not name or enter "{part}", got "{raw}"')
    return parts


def _resolve_source(hank_dir: Path, raw: str) -> tuple[Path, str, os.stat_result]:
    parts = _clean_parts(raw, "from")
    if not parts:
        raise _OpError(
            f'"from" names the hank folder itself ("{raw}"); name a file or folder inside it'
        )
    path = hank_dir
    for i, part in enumerate(parts):
        path = path / part
        try:
            st = path.lstat()
        except FileNotFoundError:
            raise _OpError(f'source "{raw}" does not exist in the hank folder {hank_dir}') from None
        if stat.S_ISLNK(st.st_mode):
            raise _OpError(
                f'source "{raw}": {"/".join(parts[: i + 1])} is a symbolic link; rig copies do '
                "not follow links (copy the real file or folder)"
            )
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            raise _OpError(f'source "{raw}": {"/".join(parts[: i + 1])} is not a folder')
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise _OpError(f'source "{raw}" is not a regular file or folder')
    return path, "/".join(parts), st


def _resolve_target(workspace: Path, raw: str, *, source_is_dir: bool) -> Path:
    parts = _clean_parts(raw, "to")
    if parts and parts[0] == DATA_LINK:
        raise _OpError(f'"to" may not write into the read-only data ("{raw}")')
    if not parts and not source_is_dir:
        raise _OpError(f'"to" must name the target file, got "{raw}"')
    path = workspace
    for i, part in enumerate(parts):
        path = path / part
        last = i == len(parts) - 1
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) and not (last and not source_is_dir):
            raise _OpError(
                f'target "{raw}": {"/".join(parts[: i + 1])} is a symbolic link; rig copies '
                "never write through links"
            )
        if not last and not stat.S_ISDIR(st.st_mode):
            raise _OpError(f'target "{raw}": {"/".join(parts[: i + 1])} is not a folder')
    return path


def _check_bounds(source: Path, target: Path, workspace: Path, op: CopyOp) -> None:
    """Refuses a copy that would never end or would eat its own source.

    A destination inside the source (the execution lives in the copied
    folder) makes the walk meet its own output and copy it again, level after
    level; a source inside the destination is overwritten by itself. Both are
    refused before anything is written. Validation refuses the cases it can
    see (:mod:`weft.config.copies`); the execution folder is only certain here.
    """
    # A link at the target's own name is replaced, never followed: judge where
    # the copy lands, the real parent folder plus the name.
    target = Path(os.path.realpath(target.parent)) / target.name
    try:
        inside(workspace, target.parent, what=f'rig copy target "{op.copy.to}"')
    except UnsafePathError as e:
        raise _OpError(str(e)) from None
    if contains(source, target):
        raise _OpError(
            f'rig copy "{printable(op.copy.from_)}" -> "{printable(op.copy.to)}": the target '
            f"{printable(str(target))} lies inside the source {printable(str(source))}, so "
            "the copy would copy itself without end; move the execution out of the copied "
            "folder (weft run --execution DIR) or copy a folder that does not hold it"
        )
    if contains(target, source):
        raise _OpError(
            f'rig copy "{printable(op.copy.from_)}" -> "{printable(op.copy.to)}": the source '
            f"{printable(str(source))} lies inside the target {printable(str(target))}, so "
            "the copy would overwrite its own source; copy to a folder beside it"
        )


def _make_dirs(workspace: Path, target: Path) -> None:
    """Creates ``target``'s missing ancestors below ``workspace`` (already checked)."""
    path = workspace
    for part in target.relative_to(workspace).parts[:-1]:
        path = path / part
        if not path.exists():
            path.mkdir()


@dataclass(slots=True)
class _CopyStats:
    files: int = 0
    bytes: int = 0
    ignored: list[str] | None = None


def _copy_file(src: Path, dst: Path, st: os.stat_result, stats: _CopyStats) -> None:
    with contextlib.suppress(FileNotFoundError):
        dst_st = dst.lstat()
        if stat.S_ISDIR(dst_st.st_mode):
            raise _OpError(f"cannot copy the file {src.name}: {dst} is a folder")
        # Replacing (not overwriting) never writes through a symlink and works
        # on a read-only file left by an earlier copy.
        dst.unlink()
    shutil.copy2(src, dst, follow_symlinks=False)
    stats.files += 1
    stats.bytes += st.st_size


def _copy_link(src: Path, dst: Path, root: Path, rel: str) -> None:
    target = os.readlink(src)
    inside = root.resolve()
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    real = Path(os.path.realpath(src))
    if (
        os.path.isabs(target)
        or lexical == ".."
        or lexical.startswith("../")
        or not real.is_relative_to(inside)
    ):
        raise _OpError(
            f"{src} is a symbolic link to {target}, outside the copied folder; rig copies "
            "only keep links that stay inside it"
        )
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(dst.lstat().st_mode):
            raise _OpError(f"cannot copy the link {src.name}: {dst} is a folder")
        dst.unlink()
    os.symlink(target, dst)


def _copy_dir(
    src: Path,
    dst: Path,
    *,
    hank_rel: str,
    root: Path,
    rules: tuple[IgnoreRules, ...],
    stats: _CopyStats,
    cancel: threading.Event,
) -> None:
    try:
        dst_st = dst.lstat()
    except FileNotFoundError:
        dst.mkdir()
    else:
        if stat.S_ISLNK(dst_st.st_mode):
            raise _OpError(f"{dst} is a symbolic link; rig copies never write through links")
        if not stat.S_ISDIR(dst_st.st_mode):
            raise _OpError(f"cannot copy the folder {src.name}: {dst} exists and is not a folder")
    nested = src / ".gitignore"
    if nested.is_file() and not nested.is_symlink():
        rules = (*rules, IgnoreRules(nested.read_text(errors="replace").splitlines(), hank_rel))
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    assert stats.ignored is not None
    for entry in entries:
        if cancel.is_set():
            raise _CopyCancelledError
        rel = f"{hank_rel}/{entry.name}"
        st = entry.stat(follow_symlinks=False)
        is_dir = stat.S_ISDIR(st.st_mode)
        if _always_excluded(entry.name) or _ignored(rules, rel, is_dir):
            stats.ignored.append(rel + ("/" if is_dir else ""))
            continue
        src_child, dst_child = Path(entry.path), dst / entry.name
        if stat.S_ISLNK(st.st_mode):
            _copy_link(src_child, dst_child, root, str(src_child.relative_to(root)))
        elif is_dir:
            _copy_dir(
                src_child,
                dst_child,
                hank_rel=rel,
                root=root,
                rules=rules,
                stats=stats,
                cancel=cancel,
            )
        elif stat.S_ISREG(st.st_mode):
            _copy_file(src_child, dst_child, st, stats)
        else:
            raise _OpError(
                f"{src_child} is not a regular file, folder or link; it cannot be copied"
            )
    # After the contents, so that a read-only source folder can still be filled.
    shutil.copystat(src, dst, follow_symlinks=False)


def _copy(
    op: CopyOp, hank_dir: Path, workspace: Path, cancel: threading.Event
) -> tuple[Path, bool, _CopyStats]:
    """Runs one copy operation (blocking). Raises :class:`_OpError`."""
    try:
        source, hank_rel, st = _resolve_source(hank_dir, op.copy.from_)
        is_dir = stat.S_ISDIR(st.st_mode)
        target = _resolve_target(workspace, op.copy.to, source_is_dir=is_dir)
        _check_bounds(source, target, workspace, op)
        stats = _CopyStats(ignored=[])
        _make_dirs(workspace, target)
        if is_dir:
            _copy_dir(
                source,
                target,
                hank_rel=hank_rel,
                root=source,
                rules=(_root_rules(hank_dir),),
                stats=stats,
                cancel=cancel,
            )
        else:
            _copy_file(source, target, st, stats)
    except OSError as e:
        where = e.filename or op.copy.to
        if e.errno in STORAGE_ERRNOS:
            # Not a rig failure to retry or ignore: the disk takes no more.
            raise storage_error(f"the rig copy to {where}", e) from e
        raise _OpError(f"copy failed: {e.strerror or e}: {where}") from None
    return target, is_dir, stats


# --------------------------------------------------------------------------- command output


class _Lines:
    """Splits a byte stream into lines; of a large chunk only the newest ``keep`` bytes of
    lines are decoded (the others are counted), so a flood costs little."""

    __slots__ = ("_buf", "keep", "line_bytes")

    def __init__(self, line_bytes: int, keep: int) -> None:
        self.line_bytes = line_bytes
        self.keep = keep
        self._buf = bytearray()

    def _pieces(self, raw: bytes) -> list[str]:
        raw = raw.removesuffix(b"\r")
        if len(raw) <= self.line_bytes:
            return [raw.decode(errors="replace")]
        step = self.line_bytes
        return [raw[i : i + step].decode(errors="replace") for i in range(0, len(raw), step)]

    def push(self, data: bytes) -> tuple[list[str], int]:
        """The lines ``data`` completes, and how many complete lines were skipped."""
        last = data.rfind(b"\n")
        if last < 0:
            self._buf += data
            lines: list[str] = []
            while len(self._buf) >= self.line_bytes:
                lines.append(bytes(self._buf[: self.line_bytes]).decode(errors="replace"))
                del self._buf[: self.line_bytes]
            return lines, 0
        block = bytes(self._buf) + data[:last]
        self._buf = bytearray(data[last + 1 :])
        skipped = 0
        if len(block) > self.keep:
            cut = block.find(b"\n", len(block) - self.keep)
            if cut < 0:
                cut = block.rfind(b"\n")
            if cut >= 0:
                skipped = block.count(b"\n", 0, cut + 1)
                block = block[cut + 1 :]
        out: list[str] = []
        for raw in block.split(b"\n"):
            out.extend(self._pieces(raw))
        return out, skipped

    def finish(self) -> list[str]:
        """The unterminated last line, if any."""
        rest, self._buf = bytes(self._buf), bytearray()
        return self._pieces(rest) if rest else []


class _Tail:
    __slots__ = ("cap", "lines", "size")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.lines: collections.deque[str] = collections.deque()
        self.size = 0

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.size += len(line) + 1
        while self.size > self.cap and len(self.lines) > 1:
            self.size -= len(self.lines.popleft()) + 1

    def text(self) -> str:
        return "\n".join(self.lines)


class _Budget:
    __slots__ = ("left", "trickle")

    def __init__(self, left: int) -> None:
        self.left = left
        self.trickle = False


class _Stream:
    """Coalesces one stream's lines into ``rig.output`` events."""

    def __init__(
        self,
        name: str,
        *,
        send: Callable[[dict[str, Any]], None],
        limits: OutputLimits,
        budget: _Budget,
        tail: _Tail,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.name = name
        self._send = send
        self._limits = limits
        self._budget = budget
        self._tail = tail
        self._loop = loop
        self._framer = _Lines(limits.line_bytes, max(limits.event_bytes, limits.tail_bytes))
        self._pending: collections.deque[str] = collections.deque()
        self._pending_size = 0
        self._dropped = 0
        self._last_flush = -1e9
        self._timer: asyncio.TimerHandle | None = None

    def feed(self, data: bytes) -> None:
        lines, skipped = self._framer.push(data)
        self._dropped += skipped
        self._add(lines)

    def close(self) -> None:
        self._add(self._framer.finish())
        self.flush()

    def _add(self, lines: list[str]) -> None:
        if not lines:
            return
        for line in lines:
            self._tail.add(line)
        if self._budget.trickle:
            self._dropped += len(self._pending) + len(lines) - 1
            self._pending.clear()
            self._pending.append(lines[-1])
            self._pending_size = len(lines[-1])
        else:
            cap = self._limits.event_bytes
            for line in lines:
                self._pending.append(line)
                self._pending_size += len(line) + 1
                while self._pending_size > cap and len(self._pending) > 1:
                    self._pending_size -= len(self._pending.popleft()) + 1
                    self._dropped += 1
        if self._timer is None:
            every = self._limits.trickle_interval if self._budget.trickle else self._limits.interval
            delay = max(0.0, self._last_flush + every - self._loop.time())
            self._timer = self._loop.call_later(delay, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        text = "\n".join(self._pending)
        data: dict[str, Any] = {"stream": self.name, "line": text, "lines": len(self._pending)}
        if self._dropped:
            data["droppedLines"] = self._dropped
        self._pending.clear()
        self._pending_size = 0
        self._dropped = 0
        self._last_flush = self._loop.time()
        self._budget.left -= len(text)
        if self._budget.left <= 0:
            self._budget.trickle = True
        self._send(data)


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, streams: dict[int, _Stream], loop: asyncio.AbstractEventLoop) -> None:
        self.streams = streams
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        stream = self.streams.get(fd)
        if stream is not None:
            stream.feed(data.encode() if isinstance(data, str) else data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _stop_group(pgid: int, protocol: _Protocol, grace: float) -> None:
    """SIGTERM the group, SIGKILL it after ``grace``, wait for the shell to exit."""
    _signal_group(pgid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(protocol.exited), grace)
    except TimeoutError:
        pass
    finally:
        _signal_group(pgid, signal.SIGKILL)
    await asyncio.shield(protocol.exited)


def _command_label(run: str) -> str:
    first = run.strip().splitlines()[0] if run.strip() else run
    if len(first) > 80:
        first = first[:77] + "..."
    elif first != run.strip():
        first += " ..."
    return f'"{first}"'


async def _run_command(
    op: CommandOp,
    index: int,
    *,
    cwd: Path,
    env: Mapping[str, str],
    emit: Emit,
    extra: Mapping[str, Any],
    limits: OutputLimits,
    timeout: float | None,
    kill_grace: float,
) -> tuple[FailureType | None, str | None, int | None, str]:
    """Runs one command; returns (failure type, message, exit code, output tail)."""
    loop = asyncio.get_running_loop()
    tail = _Tail(limits.tail_bytes)
    budget = _Budget(limits.streamed_bytes)

    def send(data: dict[str, Any]) -> None:
        emit(
            RigOutputEvent(
                stream=data["stream"],
                line=data["line"],
                lines=data["lines"],
                dropped_lines=data.get("droppedLines", 0),
                command_index=index,
                codon_id=extra.get("codonId"),
            )
        )

    streams = {
        fd: _Stream(name, send=send, limits=limits, budget=budget, tail=tail, loop=loop)
        for fd, name in ((1, "stdout"), (2, "stderr"))
    }
    protocol = _Protocol(streams, loop)
    mark = new_mark()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: protocol,
            "/bin/sh",
            "-c",
            op.command.run,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env={**env, MARK_VAR: mark},
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    )
    try:
        transport, _ = await asyncio.shield(spawn)
    except OSError as e:
        return "other", f"could not start /bin/sh in {cwd}: {e.strerror or e}", None, ""
    except asyncio.CancelledError:
        # Cancelled while the shell was being started: the event loop's own
        # cleanup would only kill the shell, not what it already spawned.
        with contextlib.suppress(BaseException):
            transport, _ = await spawn
            try:
                await _stop_group(transport.get_pid(), protocol, kill_grace)
            finally:
                _signal_group(transport.get_pid(), signal.SIGKILL)
                transport.close()
        raise
    pgid = transport.get_pid()
    codon_id = extra.get("codonId")
    started = started_event(
        pgid,
        role="rig",
        argv=["/bin/sh", "-c", op.command.run],
        mark=mark,
        codon_id=codon_id if isinstance(codon_id, str) else None,
    )
    emit(started)
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(protocol.exited)
        except TimeoutError:
            timed_out = True
            await _stop_group(pgid, protocol, kill_grace)
        # Whatever the command left running in its group goes with it.
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(protocol.pipes_closed), PIPE_GRACE)
    except asyncio.CancelledError:
        try:
            await _stop_group(pgid, protocol, kill_grace)
        finally:
            _signal_group(pgid, signal.SIGKILL)
            transport.close()
        raise
    finally:
        for stream in streams.values():
            stream.close()
        # Both ways out above SIGKILLed the group: nothing of it runs now.
        emit(ProcessEndedEvent(pid=pgid))
    code = transport.get_returncode()
    transport.close()
    if timed_out:
        return "timeout", f"timed out after {timeout:g} s", code, tail.text()
    if code == 0:
        return None, None, 0, tail.text()
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return "command_failed", f"killed by {signal.Signals(-code).name}", code, tail.text()
    return "command_failed", f"exit code {code}", code, tail.text()


# --------------------------------------------------------------------------- the rig


async def run_rig(
    ops: Sequence[CopyOp | CommandOp],
    *,
    hank_dir: Path,
    workspace: Path,
    emit: Emit,
    ignore_failures: bool = False,
    env: Mapping[str, str] | None = None,
    codon_id: str | None = None,
    command_timeout: float | None = DEFAULT_COMMAND_TIMEOUT,
    kill_grace: float = KILL_GRACE,
    limits: OutputLimits | None = None,
) -> RigResult:
    """Runs ``ops`` in order (see the module docstring) and says how it went.

    ``hank_dir`` is the folder of the hank file, ``workspace`` the agent's
    working directory (it must exist). ``env`` is the commands' whole
    environment (default: this process's). ``codon_id``, when given, is added
    to every event. ``command_timeout`` ``None`` means no limit.
    """
    limits = limits or OutputLimits()
    hank_dir = Path(hank_dir).absolute()
    workspace = Path(workspace).absolute()
    command_env = dict(os.environ if env is None else env)
    extra = {} if codon_id is None else {"codonId": codon_id}
    started = time.monotonic()
    results: list[RigOpResult] = []
    last_copied: Path | None = None
    last_copied_dir: Path | None = None
    failure: RigOpResult | None = None
    for index, op in enumerate(ops):
        if isinstance(op, CopyOp):
            label = f'"{op.copy.from_}" -> "{op.copy.to}"'
            result = await _copy_op(op, index, label, hank_dir, workspace, emit, extra)
            if result.ok:
                last_copied, last_copied_dir = result.target, result.cwd
        else:
            result = await _command_op(
                op,
                index,
                workspace=workspace,
                last_copied=last_copied_dir,
                env=command_env,
                emit=emit,
                extra=extra,
                limits=limits,
                timeout=command_timeout,
                kill_grace=kill_grace,
            )
        if not result.ok:
            ignored = op.allow_failure or ignore_failures
            if ignored:
                result = dataclasses.replace(result, failure_ignored=True)
            emit(
                RigSetupFailedEvent(
                    failure_type=result.failure_type or "other",
                    operation_type=result.type,
                    command_index=index,
                    ignored=ignored,
                    message=result.message or "",
                    codon_id=extra.get("codonId"),
                    exit_code=result.exit_code,
                )
            )
            results.append(result)
            if not ignored:
                failure = result
                break
            continue
        results.append(result)
    return RigResult(
        operations=tuple(results),
        failure=failure,
        last_copied=last_copied,
        duration=time.monotonic() - started,
    )


async def _command_op(
    op: CommandOp,
    index: int,
    *,
    workspace: Path,
    last_copied: Path | None,
    env: Mapping[str, str],
    emit: Emit,
    extra: Mapping[str, Any],
    limits: OutputLimits,
    timeout: float | None,
    kill_grace: float,
) -> RigOpResult:
    started = time.monotonic()
    label = _command_label(op.command.run)
    cwd = workspace
    if op.command.working_directory == "lastCopied":
        if last_copied is None:
            return RigOpResult(
                index=index,
                type="command",
                label=label,
                ok=False,
                duration=0.0,
                failure_type="other",
                message='workingDirectory is "lastCopied" but no copy succeeded before it',
            )
        cwd = last_copied
    failure_type, message, code, tail = await _run_command(
        op,
        index,
        cwd=cwd,
        env=env,
        emit=emit,
        extra=extra,
        limits=limits,
        timeout=timeout,
        kill_grace=kill_grace,
    )
    return RigOpResult(
        index=index,
        type="command",
        label=label,
        ok=failure_type is None,
        duration=time.monotonic() - started,
        failure_type=failure_type,
        message=message,
        exit_code=code,
        output_tail=tail,
        cwd=cwd,
    )


async def _copy_op(
    op: CopyOp,
    index: int,
    label: str,
    hank_dir: Path,
    workspace: Path,
    emit: Emit,
    extra: Mapping[str, Any],
) -> RigOpResult:
    started = time.monotonic()
    cancel = threading.Event()
    job = asyncio.ensure_future(asyncio.to_thread(_copy, op, hank_dir, workspace, cancel))
    try:
        target, is_dir, stats = await asyncio.shield(job)
    except asyncio.CancelledError:
        if not job.done():
            # The thread cannot be interrupted; it stops at the next file and
            # the caller only regains control once it has.
            cancel.set()
            with contextlib.suppress(BaseException):
                await job
        raise
    except _OpError as e:
        return RigOpResult(
            index=index,
            type="copy",
            label=label,
            ok=False,
            duration=time.monotonic() - started,
            failure_type="other",
            message=str(e),
        )
    ignored = tuple(stats.ignored or ())
    if ignored:
        shown = ", ".join(ignored[:IGNORED_IN_EVENT])
        more = (
            f" and {len(ignored) - IGNORED_IN_EVENT} more"
            if len(ignored) > IGNORED_IN_EVENT
            else ""
        )
        emit(
            InfoEvent(
                message=f"Rig copy {label}: {len(ignored)} ignored "
                f"entr{'y' if len(ignored) == 1 else 'ies'} not copied: {shown}{more}",
                command_index=index,
                codon_id=extra.get("codonId"),
            )
        )
    return RigOpResult(
        index=index,
        type="copy",
        label=label,
        ok=True,
        duration=time.monotonic() - started,
        target=target,
        cwd=target if is_dir else target.parent,
        files_copied=stats.files,
        bytes_copied=stats.bytes,
        ignored=ignored,
    )
