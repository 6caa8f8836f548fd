"""The batch store: one writer, commits all or nothing, audit rows per move in one
sequence, and a store edited behind its back refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.batch.support import Driver, command_step

from weft.batch.store import DB_FILE, BatchStore, Change
from weft.cli.batch import render_trail
from weft.errors import LockHeldError, StoreError


def test_only_one_writer_and_readers_cannot_write(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, {"workstreams": [{"id": "w", "steps": [command_step("a")]}]})
    with pytest.raises(LockHeldError, match="is being run by pid"):
        BatchStore.open(tmp_path / "state", writer=True)
    with BatchStore.open(tmp_path / "state", writer=False) as reader:
        with pytest.raises(StoreError, match="read-only"):
            reader.commit([Change("workstreams", ("w",), "S_PENDING", "S_RUNNING")], 0)
        assert reader.add_command("abandon", "w", 0) == 1, "the inbox is open to anyone"
    d.store.close()
    BatchStore.open(tmp_path / "state", writer=True).close()


def test_a_commit_is_all_or_nothing(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, {"workstreams": [{"id": "w", "steps": [command_step("a")]}]})
    good = Change("workstreams", ("w",), "S_PENDING", "S_RUNNING", metadata={"reason": "x"})
    stale = Change("steps", ("w", "a"), "S_RUNNING", "S_SUCCESS")
    with pytest.raises(StoreError, match="is in S_PENDING, not S_RUNNING"):
        d.store.commit([good, stale], 0)
    assert d.states()["w"] == "S_PENDING"
    assert d.store.transitions() == []
    d.store.commit([good], 5)
    (row,) = d.store.transitions()
    assert (row["ws_id"], row["step_id"], row["from"], row["to"]) == (
        "w",
        None,
        "S_PENDING",
        "S_RUNNING",
    )
    assert row["metadata"] == {"reason": "x"}
    assert row["at"] == "1970-01-01T00:00:00.005Z"


def test_a_reader_of_a_missing_store_is_told_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="run `weft batch run FILE` first"):
        BatchStore.open(tmp_path, writer=False)


def test_audit_ids_are_one_sequence_over_both_tables_and_the_trail_follows_them(
    tmp_path: Path,
) -> None:
    d = Driver.open(tmp_path, {"workstreams": [{"id": "w", "steps": [command_step("a")]}]})
    tool = d.store.load().breakers[0].tool
    d.store.commit(
        [
            Change("workstreams", ("w",), "S_PENDING", "S_RUNNING"),
            Change("breakers", (tool,), "CLOSED", "OPEN", metadata={"reason": "x"}),
            Change("steps", ("w", "a"), "S_PENDING", "S_RUNNING"),
        ],
        5,  # one millisecond for all three
    )
    assert [t["id"] for t in d.store.transitions()] == [1, 3]
    assert [t["id"] for t in d.store.breaker_transitions()] == [2]
    lines = render_trail(d.store.transitions(), d.store.breaker_transitions())
    assert [line.split()[1] for line in lines] == ["w", "breaker", "w/a"], "as written"


def test_a_failed_commit_leaves_the_audit_checksum_as_it_was(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, {"workstreams": [{"id": "w", "steps": [command_step("a")]}]})
    good = Change("workstreams", ("w",), "S_PENDING", "S_RUNNING")
    with pytest.raises(StoreError):
        d.store.commit([good, Change("steps", ("w", "a"), "S_RUNNING", "S_SUCCESS")], 0)
    d.store.commit([good], 1)
    d.store.close()
    with BatchStore.open(tmp_path / "state", writer=False) as reader:
        assert len(reader.transitions()) == 1


@pytest.mark.parametrize(
    ("edit", "found"),
    [
        ("UPDATE steps SET state = 'S_BOGUS'", "step w/a is in the unknown state 'S_BOGUS'"),
        ("UPDATE breakers SET state = 'AJAR'", "is in the unknown state 'AJAR'"),
        ("DELETE FROM state_transitions", "has 0 rows, but 2 were written"),
        ("UPDATE state_transitions SET to_state = 'S_SUCCESS'", "the audit trail was edited"),
        ("UPDATE workstreams SET state = 'S_SUCCESS'", "workstream w is S_SUCCESS, but its"),
        ("DELETE FROM steps", "the step w/a row is gone"),
        ("PRAGMA user_version = 999", "(PRAGMA user_version) is 999"),
        ("DROP TABLE commands", "its tables commands are gone"),
    ],
)
def test_an_edited_store_is_refused_by_readers_and_writers(
    tmp_path: Path, edit: str, found: str
) -> None:
    d = Driver.open(tmp_path, {"workstreams": [{"id": "w", "steps": [command_step("a")]}]})
    d.tick()
    d.store.close()
    with sqlite3.connect(tmp_path / "state" / DB_FILE) as conn:
        conn.execute(edit)
    conn.close()
    for writer in (False, True):
        with pytest.raises(StoreError, match="is damaged: ") as caught:
            BatchStore.open(tmp_path / "state", writer=writer, batch_file="b.toml")
        assert found in str(caught.value)
        assert "`weft batch rebuild b.toml`" in str(caught.value)


def test_a_step_folder_the_store_never_launched_is_refused(tmp_path: Path) -> None:
    d = Driver.open(tmp_path, {"workstreams": [{"id": "w", "steps": [command_step("a")]}]})
    d.store.close()
    step = tmp_path / "state" / "steps" / "w" / "a"
    step.mkdir(parents=True)
    (step / "exit").write_text("0")
    with pytest.raises(StoreError, match="steps/w/a shows a launch, but the store never"):
        BatchStore.open(tmp_path / "state", writer=False)
