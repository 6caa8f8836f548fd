"""Restoring an execution whose journal is lost, from its newest snapshot.

``weft store rebuild --from-snapshot``: the way forward the loss checks
(:mod:`weft.store.loss`) offer. The damaged journal files are moved aside,
never deleted; a new journal starts from the snapshot's state (its
``baseline``), and its first entry is an ``info`` event saying what was
restored and what is lost. The fold of the new journal is the baseline plus
the transitions after it, so every later check (gapless, snapshot agrees
with the journal) holds as for any journal.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from weft._core import Core
from weft.clock import utc_now_iso
from weft.errors import StoreError, WeftError
from weft.events.stream import InfoEvent
from weft.filemodes import private_folder
from weft.state import encode_stream
from weft.store.journal import Journal
from weft.store.lock import RuntimeLock
from weft.store.snapshot import read_snapshots, write_snapshot

JOURNAL_FILES = ("weft.db", "weft.db-wal", "weft.db-shm")
BASELINE_SEQ = 1
"""The restored journal's first entry, the note; the baseline reflects it."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What a restore did."""

    snapshot: str
    """The snapshot the state came from."""
    snapshot_seq: int
    """The journal seq that snapshot reflected in the lost journal."""
    moved_to: Path | None
    """Where the old journal files went (None when there were none)."""
    message: str
    """The journaled note."""


def _newest_usable(weft_dir: Path) -> tuple[str, bytes, int]:
    problems = []
    for snapshot in read_snapshots(weft_dir):
        try:
            core = Core(snapshot.data)
        except WeftError as e:
            problems.append(f"{snapshot.name}: {e}")
            continue
        return snapshot.name, snapshot.data, core.journal_seq or 0
    raise StoreError(
        f"{weft_dir}: no usable snapshot to restore from"
        + (f" ({'; '.join(problems)})" if problems else " (no state.json or state.json.bak)")
        + "; start over with `weft run --new --force`"
    )


def restore_from_snapshot(weft_dir: Path) -> Restored:
    """Replaces the journal of ``weft_dir`` with one that starts from the newest
    usable snapshot. Takes the lock (refused while Weft runs on it)."""
    lock = RuntimeLock.acquire(weft_dir)
    try:
        name, data, seq = _newest_usable(weft_dir)
        present = [n for n in JOURNAL_FILES if (weft_dir / n).exists()]
        moved_to = None
        if present:
            moved_to = weft_dir / f"lost-journal-{time.strftime('%Y%m%dT%H%M%S')}"
            moved_to.mkdir()
            private_folder(moved_to)
            for n in present:
                (weft_dir / n).rename(moved_to / n)
        doc = json.loads(data)
        doc["journalSeq"] = BASELINE_SEQ
        state = json.dumps(doc, separators=(",", ":")).encode()
        core = Core(state)
        message = (
            f"Journal restored from {name}, which reflected seq {seq} of the lost journal; "
            "events after it are lost"
            + (f"; the old journal files are in {moved_to}" if moved_to else "")
        )
        now = utc_now_iso()
        payload = encode_stream(InfoEvent(message=message)).decode()
        note = (
            BASELINE_SEQ,
            f"{int(time.time() * 1000):013d}-{BASELINE_SEQ:09d}",
            now,
            "event",
            "info",
            None,
            None,
            payload,
        )
        journal = Journal.open(weft_dir / "weft.db")
        try:
            journal.set_baseline(BASELINE_SEQ, name, state, note)
        finally:
            journal.close()
        core.skip_to(BASELINE_SEQ + 1)
        # Twice: the backup must not keep the lost journal's seq either.
        write_snapshot(weft_dir, core.snapshot_json())
        write_snapshot(weft_dir, core.snapshot_json())
    finally:
        lock.release()
    return Restored(name, seq, moved_to, message)
