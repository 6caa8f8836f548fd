"""The journal: group commit, the audit view, paged reads, integrity checks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tests.builders import lifecycle, move, run_started

from weft.errors import StoreCorruptError, StoreError
from weft.events.stream import AssistantActionEvent
from weft.store import ExecutionStore, Journal


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
