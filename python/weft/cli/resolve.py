"""Which execution a command means: a directory, an id, a hank, or nothing.

Every command that works on an existing execution (``status``, ``thread``,
``checkpoints``, ``rollback``, ``attach``, ``logs``, ``show``, ``store
rebuild``, ``breaker reset``) takes one optional argument, read by
:func:`resolve_execution`:

* an execution directory (or its ``.weft/`` folder): that execution;
* an execution id (the folder's name under the managed root, or a unique
  prefix of it): that managed execution;
* a hank (a ``.json`` file, or a folder holding a ``hank.json``): the most
  recently used managed execution made for it, whatever its data;
* nothing: the current folder when it is an execution, else the latest
  execution of ``./hank.json``.

Resolving only reads: a mistyped path is refused with what was expected and
nothing is created there (only ``weft run`` creates executions).
:func:`scan` lists the managed root's executions for ``weft ls`` and ``weft
clean``, reading ``execution-meta.json`` and ``state.json`` only (no SQLite,
no lock), so it is fast and safe beside live runs.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weft.errors import LockHeldError, WeftError
from weft.money import known_dollars
from weft.outcome import ending_of

if TYPE_CHECKING:
    from weft.store.journal import JournalEvent

__all__ = [
    "CRASHED_UNMARKED",
    "EXECUTION_HELP",
    "ExecutionInfo",
    "ResolveError",
    "codon_cost",
    "journal_unpriced",
    "latest_for_hank",
    "nobody_holds",
    "resolve_execution",
    "scan",
    "unpriced_pairs",
]

_HANK = "hank.json"
_WEFT = ".weft"
_META = "execution-meta.json"


EXECUTION_HELP = (
    "execution directory, execution id, or hank (its latest execution); default: the current "
    "folder if it is an execution, else the latest execution of ./hank.json"
)
"""The help of every command's optional execution argument."""


class ResolveError(WeftError):
    """The argument names no execution (exit 2: a usage error)."""


@dataclass(frozen=True, slots=True)
class ExecutionInfo:
    """One managed execution as ``weft ls`` shows it.

    ``state`` comes from ``state.json`` and its execution thread: ``live`` when
    a Weft process holds the execution now; ``crashed`` when the newest run
    crashed, or says ``running`` while no live process holds the lock (it was
    cut off without a trace: ``weft status`` says ``crashed (not yet marked)``,
    the next ``weft run`` marks it); ``running`` when it says so and its
    process is alive but not heartbeating (stalled); ``stopped`` or
    ``budget-stopped`` when the newest run was stopped by
    you or by its budget ceiling (:mod:`weft.outcome`); else ``failed`` when the
    thread failed, ``completed`` when it has nothing left to run, ``rolled-back``
    when a rollback left codons to run, ``incomplete`` when codons are left
    otherwise (a run whose codon plan grew, an older journal's stop);
    ``new`` when no run was recorded, ``unknown`` when the state cannot be
    read. ``cost`` is in dollars (the seed's getCodonCost of every record, as
    ``weft status``'s total), ``unpriced`` how many codons used a model without
    a price (``cost`` is then a lower bound, or unknown when it is 0: see
    :func:`weft.money.known_dollars`), ``size`` in bytes.
    """

    root: Path
    hank: str
    data: str | None
    created: str
    last_used: str
    state: str
    cost: float
    size: int
    live_pid: int | None
    unpriced: int = 0
    forked_from: tuple[str, str] | None = None
    """``(source execution, codon)`` of a fork (``weft fork``)."""

    @property
    def execution_id(self) -> str:
        """The folder's name."""
        return self.root.name

    def to_json(self) -> dict[str, Any]:
        """The JSON form of ``weft ls --json``."""
        return {
            "id": self.execution_id,
            "path": str(self.root),
            "hank": self.hank,
            "data": self.data,
            "created": self.created,
            "lastUsed": self.last_used,
            "state": self.state,
            # Rounded to the nano-dollar, as weft status and weft ui say it (a sum of
            # floats is not exactly the core's figure).
            "cost": known_dollars(round(self.cost, 9), self.unpriced),
            "unpricedCodons": self.unpriced,
            "sizeBytes": self.size,
            "livePid": self.live_pid,
            "forkedFrom": None
            if self.forked_from is None
            else {"execution": self.forked_from[0], "codonId": self.forked_from[1]},
        }


def managed_root() -> Path:
    """The managed root (``~/.weft-executions`` or ``$WEFT_RUNTIME_EXECUTION_BASE_DIR``)."""
    from weft.runtime.execution.basedir import managed_base_dir

    return managed_base_dir()


def _is_execution(path: Path) -> bool:
    return (path / _WEFT).is_dir() or (path.name == _WEFT and path.is_dir())


def _read_meta(root: Path) -> dict[str, Any] | None:
    try:
        meta: Any = json.loads((root / _WEFT / _META).read_bytes())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _forked(meta: dict[str, Any]) -> tuple[str, str] | None:
    forked = meta.get("forkedFrom")
    if not isinstance(forked, dict):
        return None
    return (str(forked.get("execution", "?")), str(forked.get("codonId", "?")))


def _hank_of_arg(path: Path) -> Path | None:
    """The hank file ``path`` names (a ``.json`` file, or a folder holding a ``hank.json``)."""
    if path.is_file() and path.suffix == ".json":
        return path.resolve()
    if path.is_dir() and (path / _HANK).is_file():
        return (path / _HANK).resolve()
    return None


def latest_for_hank(hank: Path, base: Path | None = None) -> Path | None:
    """The most recently used managed execution made for ``hank`` (any data), or None."""
    base = managed_root() if base is None else base
    if not base.is_dir():
        return None
    best: tuple[tuple[str, str, str], Path] | None = None
    wanted = str(hank.resolve())
    for child in base.iterdir():
        meta = _read_meta(child)
        if meta is None or meta.get("hankPath") != wanted:
            continue
        key = (str(meta.get("lastUsed", "")), str(meta.get("createdAt", "")), child.name)
        if best is None or key > best[0]:
            best = (key, child)
    return None if best is None else best[1]


def _by_id(text: str, base: Path) -> Path | None:
    if not text or "/" in text or not base.is_dir():
        return None
    exact = base / text
    if _is_execution(exact):
        return exact
    matches = sorted(p for p in base.iterdir() if p.name.startswith(text) and _is_execution(p))
    if len(matches) > 1:
        names = ", ".join(p.name for p in matches[:5])
        raise ResolveError(
            f"{text}: matches {len(matches)} executions ({names}); type more of the id"
        )
    return matches[0] if matches else None


def resolve_execution(arg: str | Path | None, *, cwd: Path | None = None) -> Path:
    """The execution directory ``arg`` names (see the module docstring).

    Raises :class:`ResolveError` saying what was expected; never creates anything.
    """
    here = (cwd or Path.cwd()).absolute()
    base = managed_root()
    if arg is None or str(arg) == "":
        if _is_execution(here):
            return here
        hank = here / _HANK
        if hank.is_file():
            found = latest_for_hank(hank, base)
            if found is None:
                raise ResolveError(
                    f"{hank} has no execution yet under {base}; start one with `weft run`, "
                    "or pass an execution directory (`weft ls` lists them)"
                )
            return found
        raise ResolveError(
            f"{here} is not an execution and holds no {_HANK}; pass an execution directory, "
            "an execution id or a hank (`weft ls` lists the executions)"
        )
    text = str(arg)
    path = Path(os.path.expanduser(text))
    path = path if path.is_absolute() else here / path
    if _is_execution(path):
        return path.parent if path.name == _WEFT else path
    named = _hank_of_arg(path)
    if named is not None:
        found = latest_for_hank(named, base)
        if found is None:
            raise ResolveError(
                f"{text}: the hank {named} has no execution under {base}; start one with "
                f"`weft run {text}`, or pass the execution directory (`weft ls` lists them)"
            )
        return found
    by_id = _by_id(text, base)
    if by_id is not None:
        return by_id
    if path.exists():
        raise ResolveError(
            f"{text}: not an execution (no {_WEFT}/ inside) and not a hank; pass an execution "
            "directory, an execution id or a hank (`weft ls` lists the executions)"
        )
    raise ResolveError(
        f"{text}: no such execution directory, execution id or hank (`weft ls` lists the "
        "executions)"
    )


def _size(root: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def _state_and_cost(weft_dir: Path) -> tuple[str, float, int]:
    try:
        raw = (weft_dir / "state.json").read_bytes()
        state: Any = json.loads(raw)
        runs = state["runs"]
        cost = records_cost(runs)
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown", 0.0, 0
    unpriced = len(journal_unpriced(weft_dir, runs))
    if not runs:
        return "new", cost, unpriced
    return execution_state(raw, runs), cost, unpriced


def execution_state(state_json: bytes, runs: list[dict[str, Any]]) -> str:
    """The state ``weft ls`` shows for an execution with runs (see :class:`ExecutionInfo`).

    The newest run's status says whether a run is on it (``running``) or died
    (``crashed``); otherwise what is left to do is the execution thread's to say,
    as ``weft thread`` does: a rollback records a *completed* run that leaves
    codons to run, and that execution is not finished.
    """
    from weft._core import analyze_execution_thread

    newest = max(runs, key=lambda r: str(r.get("startTime", "")))
    status = str(newest.get("status", "unknown"))
    if status in ("running", "crashed"):
        return status
    conditions = newest.get("startingConditions") or {}
    rolled_back = (
        conditions.get("type") == "continuation" and conditions.get("reason") == "rollback"
    )
    if status == "stopped" and rolled_back and not newest.get("codons"):
        # The run `weft rollback` records, stopped with codons left before it ran any.
        return "rolled-back"
    if status == "stopped":
        # Stopped by you or by its budget: its work is neither done nor failed.
        return ending_of(newest).word
    try:
        thread = analyze_execution_thread(state_json, validate_checkpoints=False)
    except (WeftError, ValueError):
        return status
    if thread.failed:
        return "failed"
    if thread.next_codon_id is None and not thread.has_running_codon:
        return "completed"
    if rolled_back:
        return "rolled-back"
    return "incomplete"


def codon_cost(codon: Mapping[str, Any]) -> float:
    """The seed's getCodonCost of one codon record of ``state.json``."""
    status = codon["status"]
    if status == "completed":
        return float(codon.get("finalCost", 0.0))
    if status == "failed":
        return float(codon.get("partialCost", 0.0))
    if status in ("running", "completing-sentinels"):
        return float(codon.get("currentCost", 0.0))
    return 0.0


def records_cost(runs: Iterable[Mapping[str, Any]]) -> float:
    """The seed's cost of every codon record of ``runs`` (a state document's):
    what the core's :meth:`~weft._core.Core.total_cost` says, read from the file."""
    return math.fsum(codon_cost(c) for run in runs for c in run.get("codons") or ())


UnpricedPairs = frozenset[tuple[str | None, str | None]]
"""(run id, codon id) of the codons that used a model without a price."""


def unpriced_pairs(rows: Iterable[JournalEvent]) -> UnpricedPairs:
    """The (run id, codon id) of every journaled ``token.usage`` among ``rows``
    that reports tokens without a cost (:func:`weft.events.stream.unpriced_usage`,
    the rule of a live attempt and of the budget's restore): their dollars are
    unknown, not zero. ``state.json`` cannot say it (it keeps their cost as 0)."""
    from weft.events.stream import TokenUsageEvent, unpriced_usage

    return frozenset(
        (row.run_id, row.codon_id)
        for row in rows
        if row.type == TokenUsageEvent.TYPE and unpriced_usage(row.payload)
    )


_unpriced_cache: dict[Path, tuple[tuple[int, ...], UnpricedPairs]] = {}


def journal_unpriced(weft_dir: Path, runs: Iterable[Mapping[str, Any]] = ()) -> UnpricedPairs:
    """:func:`unpriced_pairs` of the journal in ``weft_dir``, read without a
    store or a lock (a read-only SQLite connection beside any live writer).

    Skipped when no record of ``runs`` used a token (nothing can be unpriced).
    Remembered until the journal's files change, so ``weft ui``'s list, which
    is read every few seconds, reads a finished execution's journal once.
    Empty when the journal cannot be read: the cost is then shown as priced."""
    if not any(_used_tokens(c) for run in runs for c in run.get("codons") or ()):
        return frozenset()
    from weft.store.execution import DATABASE

    database = weft_dir / DATABASE
    stamp = tuple(n for name in (DATABASE, f"{DATABASE}-wal") for n in _stat_of(weft_dir / name))
    cached = _unpriced_cache.get(database)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    found = _read_unpriced(database)
    if len(_unpriced_cache) >= 512:
        _unpriced_cache.clear()
    _unpriced_cache[database] = (stamp, found)
    return found


def _read_unpriced(database: Path) -> UnpricedPairs:
    from weft.events.stream import TokenUsageEvent
    from weft.store.journal import Journal

    try:
        journal = Journal.open(database, readonly=True, check=False)
    except (WeftError, OSError, sqlite3.Error):
        return frozenset()
    try:
        return unpriced_pairs(journal.of_types([TokenUsageEvent.TYPE]))
    except sqlite3.Error:
        return frozenset()
    finally:
        journal.close()


def _stat_of(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


def _used_tokens(record: Mapping[str, Any]) -> bool:
    for key in ("finalTokens", "partialTokens", "currentTokens"):
        tokens = record.get(key)
        if isinstance(tokens, Mapping):
            return any(isinstance(v, int) and v > 0 for v in tokens.values())
    return False


def nobody_holds(weft_dir: Path) -> bool:
    """No live process holds the execution's lock (none, or its process is
    gone): a run the state calls ``running`` was cut off. An unreadable lock
    may be live, so it holds. ``weft status``'s rule."""
    from weft.store.lock import LOCK, pid_alive, read_lock

    try:
        info = read_lock(weft_dir / LOCK)
    except LockHeldError:
        return False
    return info is None or not pid_alive(info.pid)


CRASHED_UNMARKED = "crashed (not yet marked)"
"""A run the state still calls ``running`` that no live process holds, as
``weft status`` and ``weft thread`` say it (the next ``weft run`` marks it)."""


def _live_pid(weft_dir: Path) -> int | None:
    from weft.store.lock import LOCK, holder, read_lock

    # The test of weft.store.execution.live_holder, without loading the store.
    try:
        info = read_lock(weft_dir / LOCK)
    except LockHeldError:
        return -1  # unreadable lock: may be live, so treat it as live
    if info is None or holder(info, time.time()).state == "gone":
        return None
    return info.pid


def scan(base: Path | None = None, *, sizes: bool = True) -> list[ExecutionInfo]:
    """The executions under the managed root, newest (last used) first."""
    base = managed_root() if base is None else base
    if not base.is_dir():
        return []
    found: list[ExecutionInfo] = []
    for child in base.iterdir():
        if not (child / _WEFT).is_dir():
            continue
        meta = _read_meta(child) or {}
        state, cost, unpriced = _state_and_cost(child / _WEFT)
        live = _live_pid(child / _WEFT)
        if state == "running" and live is None and nobody_holds(child / _WEFT):
            state = "crashed"
        found.append(
            ExecutionInfo(
                root=child,
                hank=str(meta.get("hankPath", "?")),
                data=meta.get("readOnlySourceDataPath"),
                created=str(meta.get("createdAt", "")),
                last_used=str(meta.get("lastUsed", "")),
                state="live" if live is not None else state,
                cost=cost,
                size=_size(child) if sizes else 0,
                live_pid=live,
                unpriced=unpriced,
                forked_from=_forked(meta),
            )
        )
    found.sort(key=lambda e: (e.last_used, e.created, e.execution_id), reverse=True)
    return found
