"""The executions under a root, as the list page shows them.

Read from files only, without opening a store or taking a lock, so listing
is safe beside live runs and costs one small read per execution: the
``state.json`` snapshot (runs, codons, costs; it may trail a live run's
journal by the events since its last snapshot), ``execution-meta.json`` (the
hank) and ``runtime.lock`` (a live run's pid and port). Which codons had no
price only the journal says: it is read (read-only, once until it changes) as
``weft ls`` reads it (:func:`weft.cli.resolve.journal_unpriced`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weft.cli.resolve import execution_state, journal_unpriced, records_cost
from weft.money import known_cost, known_dollars
from weft.runtime.execution.layout import META_FILE, WEFT_DIR
from weft.store.execution import DATABASE
from weft.store.lock import LOCK, pid_alive, read_lock

STATE_FILE = "state.json"

CHANGED_BY_WRITES = (STATE_FILE, DATABASE, META_FILE)
"""The files whose modification time is the execution's "updated": only writers change
them. Not the journal's ``-wal`` and ``-shm`` files: SQLite creates and touches those
for a reader too (a ``weft ui`` replay, ``weft status``), so their time would make a
finished execution look new whenever someone looked at it. A writer's commits reach
``weft.db`` at each checkpoint and when its store closes, and ``state.json`` at each
snapshot, so a live run's time trails by at most that (its state says ``live``)."""


@dataclass(frozen=True, slots=True)
class ExecutionEntry:
    """One execution in the list."""

    id: str
    """The directory's name (unique under its root)."""
    path: Path
    hank: str
    state: str
    """``live`` while a run holds the lock, else the state ``weft ls`` shows
    (``completed``, ``failed``, ``crashed``, ``rolled-back``, ``incomplete``), ``new``
    before any run."""
    cost: float
    """Dollars, the seed's cost of every record (as ``weft status``'s total)."""
    codons: int
    updated: float
    """When the execution last changed (seconds since the epoch)."""
    port: int | None
    """A live run's WebSocket (and dashboard) port."""
    unpriced: int = 0
    """Codons that used a model without a price: :attr:`cost` is a lower bound."""

    def to_json(self, now: float) -> dict[str, Any]:
        """What the list page gets (``ageSeconds`` from ``now``)."""
        return {
            "id": self.id,
            "path": str(self.path),
            "hank": self.hank,
            "state": self.state,
            "cost": known_dollars(round(self.cost, 9), self.unpriced),
            "costText": known_cost(self.cost, self.unpriced),
            "unpricedCodons": self.unpriced,
            "codons": self.codons,
            "updated": self.updated,
            "ageSeconds": max(0.0, round(now - self.updated, 1)),
            "live": self.port is not None,
        }


def list_executions(root: Path) -> list[ExecutionEntry]:
    """The executions directly under ``root``, most recently changed first."""
    if not root.is_dir():
        return []
    entries = []
    for child in root.iterdir():
        entry = read_execution(child)
        if entry is not None:
            entries.append(entry)
    entries.sort(key=lambda e: e.updated, reverse=True)
    return entries


def read_execution(path: Path) -> ExecutionEntry | None:
    """``path`` as a list entry, or None when it holds no execution."""
    weft_dir = path / WEFT_DIR
    if not weft_dir.is_dir():
        return None
    raw = _bytes(weft_dir / STATE_FILE)
    state = _parse(raw)
    runs: list[dict[str, Any]] = list(state.get("runs", [])) if state else []
    cost = records_cost(runs)
    unpriced = len(journal_unpriced(weft_dir, runs))
    codons = sum(len(run.get("codons", [])) for run in runs)
    port = _live_port(weft_dir)
    if port is not None:
        status = "live"
    elif runs:
        # As `weft ls` says it: a rolled-back or stopped execution with codons left
        # is not "completed" though its newest run is.
        status = execution_state(raw, runs)
        # A run the snapshot calls running while nobody holds the lock died.
        status = "crashed" if status == "running" else status
    else:
        status = "new"
    updated = max((_mtime(weft_dir / name) for name in CHANGED_BY_WRITES), default=0.0)
    return ExecutionEntry(
        id=path.name,
        path=path,
        hank=_hank_name(weft_dir),
        state=status,
        cost=cost,
        codons=codons,
        updated=updated or time.time(),
        port=port,
        unpriced=unpriced,
    )


def _live_port(weft_dir: Path) -> int | None:
    try:
        info = read_lock(weft_dir / LOCK)
    except Exception:
        # Unreadable or being rewritten: not provably live; the next refresh tells.
        return None
    if info is None or info.port is None or not pid_alive(info.pid):
        return None
    return info.port


def _hank_name(weft_dir: Path) -> str:
    meta = _json(weft_dir / META_FILE)
    hank_path = str(meta.get("hankPath", "")) if meta else ""
    if not hank_path:
        return "?"
    hank = _json(Path(hank_path))
    name = (hank or {}).get("meta", {}).get("name") if isinstance(hank, dict) else None
    return str(name) if name else Path(hank_path).parent.name or hank_path


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _json(path: Path) -> dict[str, Any] | None:
    return _parse(_bytes(path))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
