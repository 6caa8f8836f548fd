"""The journal: group commit, the audit view, paged reads, integrity checks."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.builders import lifecycle, move, run_started

import weft.store.journal as journal_module
from weft import core
from weft.core import Transition
from weft.errors import StoreCorruptError, StoreError
from weft.events.stream import AssistantActionEvent
from weft.events.transitions import encode
from weft.state import Processed, StreamEvent
from weft.store import ExecutionStore, Journal
from weft.store.diskspace import is_storage_failure
from weft.store.journal import Row, payload_crc
from weft.store.writer import summarize, to_row


async def fill(execution: Path, codons: int = 3) -> None:
    store = ExecutionStore.open(execution)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    for i in range(codons):
        for event in lifecycle("r1", f"c{i}"):
            manager.transition(event)
        manager.emit(
            AssistantActionEvent(codon_id=f"c{i}", action="message", content=f"did {i}"),
            run_id="r1",
            codon_id=f"c{i}",
        )
    manager.transition(move("r1", "c0", "completed", "running"))  # refused
    await store.close(manager)


async def test_every_submission_is_one_row_in_order(tmp_path: Path) -> None:
    await fill(tmp_path)
    journal = Journal.open(tmp_path / ".weft" / "weft.db", readonly=True)
    events = [e for page in journal.pages(page=5) for e in page]
    assert [e.seq for e in events] == list(range(1, 1 + 1 + 3 * 9 + 1))
    assert events[0].type == "RunStarted"
    assert events[0].kind == "transition"
    action = next(e for e in events if e.type == "assistant.action")
    assert (action.kind, action.run_id, action.codon_id) == ("event", "r1", "c0")
    assert json.loads(action.payload) == {
        "type": "assistant.action",
        "data": {"codonId": "c0", "action": "message", "content": "did 0"},
    }
    error = events[-1]
    assert (error.kind, error.type) == ("event", "error")
    data = json.loads(error.payload)["data"]
    assert data["code"] == "invalid_transition"
    assert data["message"] == "Invalid transition from completed to running"
    assert json.loads(data["transition"])["type"] == "CodonTransitioned"
    assert [e.seq for e in journal.last(3)] == [events[-3].seq, events[-2].seq, events[-1].seq]
    assert journal.after(events[-2].seq) == [events[-1]]
    assert all(len(e.id.split("-")[1]) == 9 and len(e.id.split("-")[0]) == 13 for e in events)
    journal.close()


async def test_the_audit_view_answers_plain_sql(tmp_path: Path) -> None:
    await fill(tmp_path)
    db = sqlite3.connect(tmp_path / ".weft" / "weft.db")
    moves = db.execute(
        "SELECT from_status, to_status FROM transitions "
        "WHERE codon_id = 'c1' AND type = 'CodonTransitioned' ORDER BY seq"
    ).fetchall()
    assert moves == [
        ("preparing", "starting"),
        ("starting", "initializing"),
        ("initializing", "running"),
        ("running", "completed"),
    ]
    (meta,) = db.execute(
        "SELECT metadata FROM transitions WHERE codon_id = 'c1' AND to_status = 'completed'"
    ).fetchone()
    assert json.loads(meta) == {"checkpointSha": "sha-c1"}
    # Refused transitions are error events, not part of the audit trail.
    assert db.execute("SELECT count(*) FROM transitions WHERE type = 'error'").fetchone() == (0,)


def test_a_damaged_database_refuses_to_open(tmp_path: Path) -> None:
    weft = tmp_path / ".weft"
    weft.mkdir()
    (weft / "weft.db").write_bytes(b"SQLite format 3\x00" + b"\x07" * 4096)
    with pytest.raises(StoreCorruptError, match="will not continue"):
        ExecutionStore.open(tmp_path)
    # The lock was released on the way out: a later attempt is not blocked by it.
    assert not (weft / "runtime.lock").exists()


async def test_a_gap_in_the_sequence_is_corruption(tmp_path: Path) -> None:
    await fill(tmp_path)
    db = sqlite3.connect(tmp_path / ".weft" / "weft.db")
    db.execute("DELETE FROM events WHERE seq = 5")
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptError, match="gaps"):
        Journal.open(tmp_path / ".weft" / "weft.db")


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    await fill(tmp_path)
    db = sqlite3.connect(tmp_path / ".weft" / "weft.db")
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this Weft"):
        Journal.open(tmp_path / ".weft" / "weft.db")


def test_reading_where_there_is_no_journal_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no journal here"):
        Journal.open(tmp_path / "weft.db", readonly=True)


# -- appends through the core (weft._core.JournalAppender) --------------------


def _links_system_sqlite() -> bool:
    """Whether Python's sqlite3 module uses a shared libsqlite3 (as the core does)."""
    with open("/proc/self/maps") as maps:
        return "libsqlite3.so" in maps.read()


def _rows(payloads: list[str], first: int = 1) -> list[Row]:
    return [
        (first + i, f"id{i}", "2026-11-27T00:00:00.000Z", "event", "t", "r", None, p)
        for i, p in enumerate(payloads)
    ]


def _stored(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()


def test_a_writable_journal_appends_through_the_core_when_it_shares_sqlite(
    tmp_path: Path,
) -> None:
    journal = Journal.open(tmp_path / "j.db")
    try:
        assert journal.native == _links_system_sqlite()
    finally:
        journal.close()
    readonly = Journal.open(tmp_path / "j.db", readonly=True)
    assert not readonly.native
    readonly.close()


@settings(max_examples=40, deadline=None)
@given(payloads=st.lists(st.text(max_size=300), min_size=1, max_size=40))
def test_the_core_and_python_store_the_same_rows_and_checksums(payloads: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stored = []
        for native in (True, False):
            journal_module.NATIVE_APPEND = native
            try:
                path = Path(tmp) / f"{native}.db"
                journal = Journal.open(path)
                assert journal.native == (native and _links_system_sqlite())
                journal.append(_rows(payloads))
                journal.close()
            finally:
                journal_module.NATIVE_APPEND = True
            rows = _stored(path)
            assert [r[8] for r in rows] == [payload_crc(p) for p in payloads]
            stored.append(rows)
            # Reopening checks every payload against its checksum.
            Journal.open(path).close()
        assert stored[0] == stored[1]


def _processed(picks: list[tuple[int, int]], texts: list[str], times: list[int]) -> list[Processed]:
    """Items as the StateManager makes them, from a real core: transitions of
    two runs' lifecycles (some refused: their journal form is an error event)
    and stream events, each with its own submission time."""
    pool: list[Transition] = [run_started("r1"), *lifecycle("r1", "c1")]
    pool += [core.RunCompleted(run_id="r1", end_time="t"), run_started("r2")]
    pool += [*lifecycle("r2", "c2", costs=1), move("r2", "c9", "running", "completed")]
    c = core.Core()
    submitted: list[tuple[bytes, StreamEvent | None]] = []
    for (kind, index), text in zip(picks, texts, strict=False):
        if kind == 0:
            payload = encode(pool[index % len(pool)])
            c.submit(payload)
            submitted.append((payload, None))
        else:
            run = (None, "r1", "r2")[index % 3]
            codon = (None, "c1", f"c{text[:3]}")[index % 3]
            payload = msgspec.json.encode({"type": "info", "data": {"message": text}})
            c.emit(payload)
            kind = ("info", "x.y", text or "e")[index % 3]
            submitted.append((payload, StreamEvent(kind, run, codon)))
    items = []
    for o, (payload, stream), at in zip(c.drain(), submitted, times, strict=False):
        if stream is None and not o.ok:
            stream = StreamEvent("error", o.run_id, o.codon_id)
        items.append(Processed(o.seq, payload, None, o, at, stream))
    return items


@pytest.mark.skipif(not _links_system_sqlite(), reason="the core cannot share this SQLite")
@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40)), min_size=1, max_size=30),
    texts=st.lists(st.text(max_size=40), min_size=30, max_size=30),
    # Any time_ns a clock gives (from 1970 to 2262: a signed 64-bit count).
    times=st.lists(st.integers(0, 2**63 - 1), min_size=30, max_size=30),
)
def test_the_core_builds_the_rows_python_builds_from_processed_items(
    picks: list[tuple[int, int]], texts: list[str], times: list[int]
) -> None:
    items = _processed(picks, texts, times)
    with tempfile.TemporaryDirectory() as tmp:
        native = Journal.open(Path(tmp) / "core.db")
        python = Journal.open(Path(tmp) / "python.db")
        try:
            summary = native.append_processed(items)
            python.append([to_row(p) for p in items])
        finally:
            native.close()
            python.close()
        assert _stored(Path(tmp) / "core.db") == _stored(Path(tmp) / "python.db")
    assert summary == summarize(items)


def test_another_sqlite_in_the_core_falls_back_to_python_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A limit set on the core's side that Python does not see: two libraries.
    monkeypatch.setattr(
        journal_module.JournalAppender, "soft_heap_limit", lambda self, limit: limit
    )
    journal = Journal.open(tmp_path / "j.db")
    try:
        assert not journal.native
        journal.append(_rows(["{}", "[]"]))
        assert journal.count() == 2
    finally:
        journal.close()


@pytest.mark.skipif(not _links_system_sqlite(), reason="the core cannot share this SQLite")
def test_the_core_reports_sqlite_errors_as_python_does_and_keeps_nothing_of_the_batch(
    tmp_path: Path,
) -> None:
    journal = Journal.open(tmp_path / "j.db")
    try:
        assert journal.native
        journal.append(_rows(["{}"]))
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            journal.append(_rows(["{}", "{}"], first=2) + _rows(["{}"], first=1))
        assert journal.count() == 1, "the failed batch left rows behind"
        journal.execute_on_writers("PRAGMA max_page_count = 8")
        with pytest.raises(sqlite3.OperationalError) as full:
            journal.append(_rows(["x" * 4000] * 64, first=2))
        assert is_storage_failure(full.value), full.value
        assert journal.count() == 1
        journal.execute_on_writers("PRAGMA max_page_count = 1073741823")
        journal.append(_rows(["{}"], first=2))
        assert journal.count() == 2
    finally:
        journal.close()
    closed = journal_module.JournalAppender(tmp_path / "j.db")
    closed.close()
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        closed.append(_rows(["{}"], first=3))


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
@pytest.mark.parametrize(("shared", "mode"), [("", 0o600), ("1", 0o640)])
def test_the_journal_and_the_files_sqlite_makes_beside_it_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: str, mode: int
) -> None:
    monkeypatch.setenv("WEFT_SHARED_GROUP", shared)
    path = tmp_path / "weft.db"
    journal = Journal.open(path)
    try:
        journal.append([(1, "e1", "t", "event", "info", None, None, "{}")])
        # Open, so SQLite's -wal and -shm exist now: made by SQLite, with weft.db's mode.
        for name in ("weft.db", "weft.db-wal", "weft.db-shm"):
            assert _mode(tmp_path / name) == mode, name
    finally:
        journal.close()


@pytest.mark.usefixtures("permissive_umask")
def test_a_journal_an_older_weft_left_readable_is_tightened_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "weft.db"
    Journal.open(path).close()
    path.chmod(0o644)
    Journal.open(path, readonly=True).close()
    assert _mode(path) == 0o644  # a reader changes nothing
    Journal.open(path).close()
    assert _mode(path) == 0o600
