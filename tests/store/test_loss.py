"""Loss is detected, never papered over: a missing or emptied journal beside
history, a damaged WAL, a snapshot beyond the journal's end; and the way
forward, ``weft store rebuild --from-snapshot``."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.builders import lifecycle, run_started

from weft.cli import main
from weft.errors import JournalLossError, StoreCorruptError
from weft.events.stream import InfoEvent
from weft.store import ExecutionStore, Journal
from weft.store.loss import check_database, wal_damage
from weft.store.schema import MIGRATIONS


async def build(
    execution: Path, codons: int, *, tail: int = 0, keep_open: Path | None = None
) -> None:
    """An execution with one run of ``codons`` completed codons. With
    ``keep_open``, the .weft folder is copied there while the journal is still
    open, so the copy keeps its WAL (a clean close folds it into weft.db)."""
    store = ExecutionStore.open(execution)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    for i in range(codons):
        for event in lifecycle("r1", f"c{i}"):
            manager.transition(event)
        await manager.flush()  # one commit per codon: several WAL commit frames
    for n in range(tail):
        # Commits after the last snapshot: only the WAL itself can tell they are gone.
        manager.emit(InfoEvent(message=f"{n} " + "x" * 3000), run_id="r1")
        await manager.flush()
    if keep_open is not None:
        shutil.copytree(execution / ".weft", keep_open / ".weft")
    await store.close(manager)


def files(weft_dir: Path) -> dict[str, bytes]:
    """Name -> bytes of the folder's files, but SQLite's scratch: the shared-memory
    index and an empty WAL a reading connection creates hold no data."""
    return {
        p.name: p.read_bytes()
        for p in weft_dir.iterdir()
        if p.is_file()
        and p.name != "weft.db-shm"
        and not (p.name == "weft.db-wal" and p.stat().st_size == 0)
    }


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An execution as a crash leaves it: the journal's commits still in its WAL."""
    import asyncio

    import uvloop

    root = tmp_path_factory.mktemp("crashed")
    (root / "copy").mkdir()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(build(root / "live", 6, tail=6, keep_open=root / "copy"))
    weft_dir = root / "copy" / ".weft"
    (weft_dir / "runtime.lock").unlink()
    assert (weft_dir / "weft.db-wal").stat().st_size > 4096
    return root / "copy"


def copy_of(execution: Path, tmp_path: Path) -> Path:
    target = tmp_path / "x"
    shutil.copytree(execution, target)
    return target


# --------------------------------------------------------------------------- the journal file


async def test_a_missing_journal_beside_snapshots_is_refused_and_nothing_changes(
    tmp_path: Path,
) -> None:
    await build(tmp_path, 2)
    weft_dir = tmp_path / ".weft"
    (weft_dir / "weft.db").unlink()
    before = files(weft_dir)
    with pytest.raises(JournalLossError) as caught:
        ExecutionStore.open(tmp_path)
    message = str(caught.value)
    assert "weft.db is missing, but state.json, state.json.bak" in message
    assert "every journaled event is gone" in message
    assert "weft store rebuild --from-snapshot" in message
    assert "--new --force" in message
    assert "\n" not in message
    assert files(weft_dir) == before  # no new database, the lock released


async def test_an_empty_journal_beside_snapshots_is_refused_read_only_too(tmp_path: Path) -> None:
    await build(tmp_path, 1)
    (tmp_path / ".weft" / "weft.db").write_bytes(b"")
    with pytest.raises(JournalLossError, match=r"is empty \(0 bytes\)"):
        ExecutionStore.open(tmp_path, readonly=True)


def test_a_new_execution_without_history_creates_its_journal(tmp_path: Path) -> None:
    weft_dir = tmp_path / ".weft"
    weft_dir.mkdir()
    check_database(weft_dir)  # no evidence of history: nothing to refuse
    store = ExecutionStore.open(tmp_path)
    assert store.recovery.source == "new"
    store.journal.close()
    assert store.lock is not None
    store.lock.release()


# --------------------------------------------------------------------------- the WAL


def test_an_intact_wal_and_a_torn_last_frame_are_accepted(crashed: Path, tmp_path: Path) -> None:
    wal = crashed / ".weft" / "weft.db-wal"
    assert wal_damage(wal) is None
    torn = tmp_path / "torn-wal"
    data = wal.read_bytes()
    torn.write_bytes(data[: len(data) - 100])  # a crash cut the last write short
    assert wal_damage(torn) is None


def test_a_deleted_wal_is_a_loss_the_snapshot_proves(crashed: Path, tmp_path: Path) -> None:
    execution = copy_of(crashed, tmp_path)
    (execution / ".weft" / "weft.db-wal").unlink()
    before = files(execution / ".weft")
    with pytest.raises(JournalLossError) as caught:
        ExecutionStore.open(execution)
    assert "state.json" in str(caught.value)
    assert files(execution / ".weft") == before


def test_a_damaged_wal_header_is_refused_before_sqlite_resets_it(
    crashed: Path, tmp_path: Path
) -> None:
    execution = copy_of(crashed, tmp_path)
    wal = execution / ".weft" / "weft.db-wal"
    data = bytearray(wal.read_bytes())
    data[8] ^= 0xFF  # the page size: the header checksum no longer matches
    wal.write_bytes(bytes(data))
    with pytest.raises(JournalLossError, match="write-ahead log is damaged: its header is damaged"):
        ExecutionStore.open(execution)
    assert wal.read_bytes() == bytes(data)


def last_commit_start(wal: bytes) -> int:
    """The byte where the WAL's last transaction begins (after the commit frame before it)."""
    page_size = int.from_bytes(wal[8:12], "big")
    frame = 24 + page_size
    commits = [
        at
        for at in range(32, len(wal) - frame + 1, frame)
        if int.from_bytes(wal[at + 4 : at + 8], "big")  # a commit frame's db size
    ]
    return commits[-2] + frame


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.floats(0.0, 1.0), length=st.integers(1, 6000), seed=st.integers(0, 255))
def test_a_garbled_wal_is_refused_or_loses_nothing(
    crashed: Path, tmp_path_factory: pytest.TempPathFactory, start: float, length: int, seed: int
) -> None:
    """Whatever region of the WAL is overwritten, the store either refuses to
    open or holds every committed event. The one exception is inherent: damage
    to the frames of the very last commit looks exactly like a write a crash
    cut short, so that commit (one event here) may be dropped, never more."""
    execution = copy_of(crashed, tmp_path_factory.mktemp("garble"))
    expected = Journal.open(crashed / ".weft" / "weft.db", readonly=True)
    try:
        total = expected.last_seq()
    finally:
        expected.close()
    wal = execution / ".weft" / "weft.db-wal"
    data = bytearray(wal.read_bytes())
    at = int(start * (len(data) - 1))
    end = min(len(data), at + length)
    for i in range(at, end):
        data[i] = (data[i] * 31 + seed + i) & 0xFF
    wal.write_bytes(bytes(data))
    try:
        store = ExecutionStore.open(execution, readonly=True)
    except StoreCorruptError:
        return  # refused (JournalLossError is one)
    try:
        last_only = end > last_commit_start(bytes(data))
        assert store.journal.last_seq() >= total - (1 if last_only else 0)
    finally:
        store.journal.close()


# --------------------------------------------------------------------------- the snapshot's reach


async def test_a_snapshot_beyond_the_journal_is_refused_before_the_wal_is_folded(
    crashed: Path, tmp_path: Path
) -> None:
    execution = copy_of(crashed, tmp_path)
    wal = execution / ".weft" / "weft.db-wal"
    data = wal.read_bytes()
    wal.write_bytes(data[: len(data) // 3])  # commits cut off, the rest intact
    with pytest.raises(JournalLossError, match=r"reflects journal seq \d+ but the journal ends at"):
        ExecutionStore.open(execution)
    assert wal.read_bytes() == data[: len(data) // 3]  # the evidence stays


# --------------------------------------------------------------------------- the way forward


async def test_rebuild_from_snapshot_restores_a_lost_journal_and_the_execution_goes_on(
    crashed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    execution = copy_of(crashed, tmp_path)
    weft_dir = execution / ".weft"
    snapshot = json.loads((weft_dir / "state.json").read_bytes())
    old_wal = (weft_dir / "weft.db-wal").read_bytes()
    (weft_dir / "weft.db-wal").unlink()
    (weft_dir / "weft.db-wal.kept").write_bytes(old_wal)

    assert main(["store", "rebuild", "--from-snapshot", str(execution)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(
        f"Journal restored from state.json, which reflected seq {snapshot['journalSeq']}"
    )
    (lost,) = weft_dir.glob("lost-journal-*")
    assert (lost / "weft.db").exists()  # moved aside, not deleted

    store = ExecutionStore.open(execution)
    assert store.recovery.source == "state.json"
    state = json.loads(store.core.state_json())
    assert state["runs"] == snapshot["runs"]
    (note,) = store.journal.after(0)
    assert (note.seq, note.type) == (1, "info")
    assert "Journal restored from state.json" in json.loads(note.payload)["data"]["message"]
    # The execution goes on: new transitions follow the note, and the fold of
    # the restored journal (baseline + tail) is the live state.
    manager = store.state_manager()
    for event in lifecycle("r1", "after"):
        manager.transition(event)
    await manager.flush()
    live = store.core.state_json()
    await store.close(manager)
    (weft_dir / "state.json").unlink()
    (weft_dir / "state.json.bak").unlink()
    rebuilt = ExecutionStore.open(execution, readonly=True)
    try:
        assert rebuilt.recovery.source == "journal"
        assert rebuilt.core.state_json() == live
    finally:
        rebuilt.journal.close()


def test_rebuild_from_snapshot_without_a_usable_snapshot_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".weft").mkdir()
    (tmp_path / ".weft" / "state.json").write_text("{torn")
    assert main(["store", "rebuild", "--from-snapshot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("weft: error: ")
    assert "no usable snapshot to restore from" in err
    assert not (tmp_path / ".weft" / "weft.db").exists()


# --------------------------------------------------------------------------- silent corruption


async def test_a_payload_altered_after_it_was_written_is_found_at_open(tmp_path: Path) -> None:
    await build(tmp_path, 2)
    db = sqlite3.connect(tmp_path / ".weft" / "weft.db")
    # A well-formed change SQLite itself cannot notice: a cost in a payload.
    db.execute("UPDATE events SET payload = replace(payload, '0.002', '0.200') WHERE seq = 7")
    db.commit()
    db.close()
    for readonly in (True, False):
        with pytest.raises(StoreCorruptError, match=r"journal entry seq 7 was altered"):
            ExecutionStore.open(tmp_path, readonly=readonly)


def test_rows_written_before_checksums_existed_are_accepted(tmp_path: Path) -> None:
    """A version-1 journal migrates; its old rows have no checksum to compare."""
    path = tmp_path / "weft.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0])
    db.execute("PRAGMA user_version = 1")
    db.execute(
        "INSERT INTO events (seq, id, timestamp, kind, type, payload) "
        "VALUES (1, 'i', 't', 'event', 'info', '{\"type\":\"info\",\"data\":{\"message\":\"m\"}}')"
    )
    db.commit()
    db.close()
    journal = Journal.open(path)
    try:
        journal.append([(2, "j", "t", "event", "info", None, None, '{"type":"info"}')])
    finally:
        journal.close()
    journal = Journal.open(path, readonly=True)
    try:
        assert journal.last_seq() == 2
    finally:
        journal.close()
