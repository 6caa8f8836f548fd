"""Finding journal data that is gone, before SQLite can paper over it.

SQLite is forgiving in ways that hide loss: a missing or 0-byte database
opens as a new, empty one; a WAL whose header is damaged is ignored whole,
and one whose frames are damaged is read up to the first bad frame, silently
dropping every commit after it. The journal would then look short but
healthy, and recovery would start the execution over on top of the work the
lost events describe. These checks run before SQLite opens the files (it
would reset a damaged WAL on its first write) and raise
:class:`~weft.errors.JournalLossError` with what was lost and the ways
forward; nothing is changed on disk.

What proves history existed: a snapshot (``state.json`` or its backup), the
checkpoint repository, or a run folder under ``runs/``. The store creates
the journal before any of those, so none of them can exist beside a journal
that never held anything.

The third check, a snapshot whose ``journalSeq`` lies beyond the journal's
end (and which holds more than the journal's state: else only its number is
wrong), needs the journal open: :func:`check_reach` makes it on a read-only
connection before the writable one opens (whose close would fold a torn WAL
into the database and remove it, evidence included), and
:mod:`weft.store.recovery` makes it again on the snapshot it uses.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import msgspec

from weft.errors import JournalLossError
from weft.store.journal import Journal
from weft.store.snapshot import read_snapshots

DATABASE = "weft.db"
WAL = "weft.db-wal"

_WAL_MAGIC = (0x377F0682, 0x377F0683)
"""The WAL header's magic; the low bit says the checksums read big-endian words."""
_WAL_HEADER = 32
_FRAME_HEADER = 24


def history_evidence(weft_dir: Path) -> list[str]:
    """What in ``weft_dir`` proves the execution had journaled history."""
    found = [name for name in ("state.json", "state.json.bak") if (weft_dir / name).exists()]
    if (weft_dir / "checkpoints" / ".weftcheckpoints").exists():
        found.append("checkpoints/")
    runs = weft_dir / "runs"
    if runs.is_dir() and any(runs.iterdir()):
        found.append("runs/")
    return found


def ways_forward(weft_dir: Path, *, snapshot: bool) -> str:
    """The sentence telling the user what they can do about a loss."""
    execution = weft_dir.parent
    keep = f"Nothing was changed; keep a copy of {weft_dir} first. Ways forward: "
    rebuild = (
        f"`weft store rebuild --from-snapshot {execution}` continues from the newest "
        "snapshot (the events after it stay lost), or "
        if snapshot
        else ""
    )
    return keep + rebuild + f"`weft run --execution {execution} --new --force` starts over"


def lost_events_message(weft_dir: Path, snapshot: str, seq: int, last: int) -> str:
    """The refusal for a snapshot that reflects more of the journal than is left."""
    return (
        f"{weft_dir / DATABASE}: the journal lost committed events: {snapshot} reflects "
        f"journal seq {seq} but the journal ends at {last} ({seq - last} events gone). "
        + ways_forward(weft_dir, snapshot=True)
    )


def check_database(weft_dir: Path) -> None:
    """Refuses a missing or empty journal beside evidence of history."""
    path = weft_dir / DATABASE
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        what = "is missing"
    else:
        if size:
            return
        what = "is empty (0 bytes)"
    refuse_empty(weft_dir, what)


def refuse_empty(weft_dir: Path, what: str = "holds no journal") -> None:
    """Refuses a journal without events beside evidence of history
    (``what`` says how it is empty)."""
    evidence = history_evidence(weft_dir)
    if not evidence:
        return  # a new execution: the journal is created now
    snapshot = any(e.startswith("state.json") for e in evidence)
    raise JournalLossError(
        f"{weft_dir / DATABASE} {what}, but {', '.join(evidence)} prove the execution has "
        "history: every journaled event is gone. " + ways_forward(weft_dir, snapshot=snapshot)
    )


def _checksum(data: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def wal_damage(path: Path) -> str | None:
    """Why the WAL at ``path`` is damaged in a way that loses commits, or None.

    Damage is a non-empty file without a valid header (SQLite would ignore it
    all), or a commit frame that carries the current salts after the point
    where the checksum chain breaks: frames are appended in order, so that
    commit was written after the broken frame in this WAL generation, and
    SQLite would drop it and everything between. Normal after a crash, and
    never reported: a torn last frame, frames of a transaction that never
    committed (SQLite may rewrite those in place before recomputing their
    checksums), and frames with other salts left over from an earlier
    generation.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    with path.open("rb") as fh:
        header = fh.read(_WAL_HEADER)
        if len(header) < _WAL_HEADER:
            return f"its header is cut short ({size} bytes)"
        magic, _version, page_size, _ckpt, salt1, salt2, c0, c1 = struct.unpack(">8I", header)
        big = magic == _WAL_MAGIC[1]
        valid_size = page_size >= 512 and page_size & (page_size - 1) == 0
        if (
            magic not in _WAL_MAGIC
            or not valid_size
            or _checksum(header[:24], big, 0, 0)
            != (
                c0,
                c1,
            )
        ):
            return "its header is damaged"
        frame = _FRAME_HEADER + page_size
        s0, s1 = c0, c1
        offset = _WAL_HEADER
        broken_at: int | None = None
        while offset + frame <= size:
            fh.seek(offset)
            data = fh.read(frame)
            _page, commit, f1, f2, fc0, fc1 = struct.unpack(">6I", data[:_FRAME_HEADER])
            if broken_at is None:
                if (f1, f2) != (salt1, salt2):
                    broken_at = offset
                else:
                    s0, s1 = _checksum(data[:8], big, s0, s1)
                    s0, s1 = _checksum(data[_FRAME_HEADER:], big, s0, s1)
                    if (s0, s1) != (fc0, fc1):
                        broken_at = offset
            elif (f1, f2) == (salt1, salt2) and commit:
                return (
                    f"the frame at byte {broken_at} is damaged and SQLite would drop the "
                    f"commits after it (the commit frame at byte {offset} is one)"
                )
            offset += frame
    return None


def check_wal(weft_dir: Path) -> None:
    """Refuses a WAL whose damage would silently drop commits."""
    path = weft_dir / WAL
    try:
        problem = wal_damage(path)
    except OSError as e:
        problem = f"it cannot be read ({os.strerror(e.errno or 0)})"
    if problem is None:
        return
    raise JournalLossError(
        f"{path}: the journal's write-ahead log is damaged: {problem}; committed events "
        "would be lost. " + ways_forward(weft_dir, snapshot=bool(history_evidence(weft_dir)))
    )


def check_before_open(weft_dir: Path) -> None:
    """Every check that must run before SQLite opens the journal."""
    check_database(weft_dir)
    check_wal(weft_dir)


class _Reach(msgspec.Struct, rename="camel"):
    journal_seq: int | None = None


def snapshot_reach(weft_dir: Path) -> tuple[str, int] | None:
    """(name, journalSeq) of the first snapshot that parses, best first."""
    for snapshot in read_snapshots(weft_dir):
        try:
            seq = msgspec.json.decode(snapshot.data, type=_Reach).journal_seq
        except (msgspec.DecodeError, UnicodeDecodeError):
            continue
        return snapshot.name, seq or 0
    return None


def check_reach(weft_dir: Path) -> None:
    """Refuses a journal that ends before the seq its snapshot reflects,
    reading it without writing anything."""
    reach = snapshot_reach(weft_dir)
    path = weft_dir / DATABASE
    if reach is None or reach[1] == 0 or not path.exists():
        return
    journal = Journal.open(
        path,
        readonly=True,
        check=False,
        on_empty=lambda: refuse_empty(weft_dir, "holds no schema (its tables are gone)"),
    )
    try:
        if reach[1] > journal.last_seq():
            # Recovery's own cross-check (read-only here): a snapshot holding exactly
            # the journal's state has a wrong journalSeq (noted when the store opens),
            # one holding more proves the loss and raises.
            from weft.store.recovery import recover  # recovery imports this module

            recover(weft_dir, journal)
    finally:
        journal.close()
