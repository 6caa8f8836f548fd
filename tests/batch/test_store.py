"""The batch store: one writer, commits all or nothing, audit rows per move."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.batch.support import Driver, command_step

from weft.batch.store import BatchStore, Change
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
