"""The audit trail holds real moves only: what moved nothing (an abandon request,
a timeout's stop, a breaker reset where it stood, a rebuild's "runs again") is an
audit note, checksummed with the trail; a store written by the code before
notes (version 1, self-moves and all) is upgraded by its next writer."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests.batch.support import Driver, assert_no_self_moves, command_step

from weft.batch.store import SCHEMA_VERSION, BatchStore
from weft.errors import StoreError

ROOT = Path(__file__).resolve().parents[2]


def _every_kind_of_non_move(d: Driver) -> None:
    """Drives ``d`` through each writer that used to write a self-move."""
    d.commit(d.scheduler.request_abandon("p")[0])  # a pending workstream: a request only
    assert d.tick() == ["t/a"]
    d.now += 1_000
    tick = d.scheduler.tick(d.now, 2)
    assert tick.cancels == ["t/a"]
    d.commit(tick.changes)  # the timeout's stop
    d.finish("t/a", None)
    changes, _ = d.scheduler.reset_breaker("true", d.now)  # CLOSED -> CLOSED
    d.commit(changes)
    d.run()


def _doc() -> dict[str, object]:
    return {
        "workstreams": [
            {"id": "p", "steps": [command_step("a")]},
            {"id": "t", "steps": [command_step("a", timeout_seconds=1)]},
        ]
    }


def test_what_moved_nothing_is_a_note_and_every_transition_moves(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, _doc())
    _every_kind_of_non_move(d)
    assert_no_self_moves(d.store)
    notes = [
        (n["subject"], n["name"], n["state"], n["metadata"]["reason"]) for n in d.store.notes()
    ]
    assert notes == [
        ("workstream", "p", "S_PENDING", "abandon requested by the user"),
        ("step", "t/a", "S_RUNNING", "timed out after 1s: stopping"),
        ("breaker", "true", "CLOSED", "reset"),
    ]
    # One id sequence over the transitions and the notes, and one checksum.
    ids = sorted(
        [t["id"] for t in d.store.transitions()]
        + [t["id"] for t in d.store.breaker_transitions()]
        + [n["id"] for n in d.store.notes()]
    )
    assert ids == list(range(1, len(ids) + 1))
    d.store.close()
    with BatchStore.open(tmp_path / "state", writer=False) as reader:
        assert len(reader.notes()) == 3


def test_an_edited_note_is_refused_like_an_edited_transition(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, _doc())
    _every_kind_of_non_move(d)
    d.store.close()
    with sqlite3.connect(tmp_path / "state" / "batch.db") as conn:
        conn.execute("UPDATE audit_notes SET metadata = '{}' WHERE subject = 'step'")
    with pytest.raises(StoreError, match="the audit trail was edited"):
        BatchStore.open(tmp_path / "state", writer=False)


def _old_store_module(tmp_path: Path) -> ModuleType:
    """``weft.batch.store`` as it was before audit notes (git history), to write
    a version 1 store with the old code itself."""
    source = subprocess.run(
        ["git", "show", "0c73571:python/weft/batch/store.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = tmp_path / "old_store.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_weft_batch_store", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_version_1_store_is_read_and_upgraded_by_its_next_writer(tmp_path: Path) -> None:
    old = _old_store_module(tmp_path)
    d = Driver.open(tmp_path / "new", _doc())  # the plan, as a template
    stored = d.store.load()
    folder = tmp_path / "v1"
    with old.BatchStore.open(folder, writer=True) as store:
        store.insert_plan(stored.workstreams, stored.steps, stored.breakers, 0)
        request = old.Change(
            "workstreams",
            ("p",),
            "S_PENDING",
            "S_PENDING",
            values={"abandon_requested": True},
            metadata={"reason": "abandon requested by the user"},
            audit=True,
        )
        start = old.Change("workstreams", ("t",), "S_PENDING", "S_RUNNING")
        store.commit([request, start], 1_000)
        assert [(t["from"], t["to"]) for t in store.transitions()] == [
            ("S_PENDING", "S_PENDING"),
            ("S_PENDING", "S_RUNNING"),
        ]
    with BatchStore.open(folder, writer=False) as reader:  # read as it is
        assert len(reader.transitions()) == 2
        assert reader.notes() == []
    with BatchStore.open(folder, writer=True) as writer:  # upgraded
        assert_no_self_moves(writer)
        (note,) = writer.notes()
        assert (note["id"], note["subject"], note["name"], note["state"]) == (
            1,
            "workstream",
            "p",
            "S_PENDING",
        )
        assert note["metadata"]["reason"] == "abandon requested by the user"
    with BatchStore.open(folder, writer=False) as reader:  # its checksum holds
        assert [(t["id"], t["to"]) for t in reader.transitions()] == [(2, "S_RUNNING")]
    with sqlite3.connect(folder / "batch.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
