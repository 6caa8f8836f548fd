"""Recovery: snapshot + journal tail, and every fallback with its reason."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from tests.builders import lifecycle, run_started
from tests.oracle import OracleCore

from weft.errors import JournalLossError
from weft.store import ExecutionStore, Journal
from weft.store.recovery import recover


async def build(execution: Path, codons: int) -> bytes:
    """A store with ``codons`` completed codons; returns the final state document."""
    store = ExecutionStore.open(execution)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    for i in range(codons):
        for event in lifecycle("r1", f"c{i}"):
            manager.transition(event)
    await manager.flush()
    state = store.core.state_json()
    await store.close(manager)
    return state


def reopen(execution: Path) -> ExecutionStore:
    return ExecutionStore.open(execution, readonly=True)


def weft(execution: Path) -> Path:
    return execution / ".weft"


async def test_a_clean_reopen_uses_state_json_and_replays_nothing(tmp_path: Path) -> None:
    state = await build(tmp_path, 4)
    store = reopen(tmp_path)
    assert (store.recovery.source, store.recovery.notes, store.recovery.replayed) == (
        "state.json",
        [],
        0,
    )
    assert store.core.state_json() == state
    assert store.core.next_seq == store.journal.last_seq() + 1


async def test_a_snapshot_behind_the_journal_is_brought_up_to_date(tmp_path: Path) -> None:
    await build(tmp_path, 1)
    old_snapshot = (weft(tmp_path) / "state.json").read_bytes()
    state = await build_more(tmp_path)
    (weft(tmp_path) / "state.json").write_bytes(old_snapshot)
    store = reopen(tmp_path)
    assert store.recovery.source == "state.json"
    assert store.recovery.replayed > 0
    assert store.core.state_json() == state


async def build_more(execution: Path) -> bytes:
    store = ExecutionStore.open(execution)
    manager = store.state_manager()
    for event in lifecycle("r1", "later"):
        manager.transition(event)
    await manager.flush()
    state = store.core.state_json()
    await store.close(manager)
    return state


async def test_a_torn_state_json_falls_back_to_the_backup_and_says_why(tmp_path: Path) -> None:
    state = await build(tmp_path, 3)
    path = weft(tmp_path) / "state.json"
    path.write_bytes(path.read_bytes()[:40])
    store = reopen(tmp_path)
    assert store.recovery.source == "state.json.bak"
    assert store.recovery.notes[0].startswith("state.json is unusable: invalid state document")
    assert store.core.state_json() == state


async def test_both_snapshots_unusable_rebuild_from_the_journal(tmp_path: Path) -> None:
    state = await build(tmp_path, 3)
    (weft(tmp_path) / "state.json").write_text("garbage")
    (weft(tmp_path) / "state.json.bak").unlink()
    store = ExecutionStore.open(tmp_path)  # writable: the rebuilt state is saved at once
    assert store.recovery.source == "journal"
    assert store.recovery.notes[-1] == "state rebuilt from the journal alone"
    assert store.core.state_json() == state
    await store.close()
    assert reopen(tmp_path).recovery.source == "state.json"


async def test_a_snapshot_ahead_of_the_journal_proves_a_loss_and_is_refused(
    tmp_path: Path,
) -> None:
    await build(tmp_path, 2)
    path = weft(tmp_path) / "state.json"
    seq = json.loads(path.read_bytes())["journalSeq"]
    # The journal's last five rows gone (c1's end): state.json holds what they did.
    with sqlite3.connect(weft(tmp_path) / "weft.db") as conn:
        conn.execute("DELETE FROM events WHERE seq > ?", (seq - 5,))
    before = path.read_bytes()
    with pytest.raises(JournalLossError) as caught:
        reopen(tmp_path)
    message = str(caught.value)
    assert f"state.json reflects journal seq {seq} but the journal ends at {seq - 5}" in message
    assert "weft store rebuild --from-snapshot" in message
    assert "\n" not in message
    assert path.read_bytes() == before


async def test_a_snapshot_that_disagrees_with_the_journal_loses(tmp_path: Path) -> None:
    state = await build(tmp_path, 2)
    path = weft(tmp_path) / "state.json"
    doc = json.loads(path.read_bytes())
    doc["journalSeq"] = 1  # claims to reflect only RunStarted, yet holds codons
    path.write_text(json.dumps(doc))
    (weft(tmp_path) / "state.json.bak").unlink()
    store = reopen(tmp_path)
    assert store.recovery.source == "journal"
    assert "but the journal through seq 1 started 1 and 0" in store.recovery.notes[0]
    assert store.core.state_json() == state


async def test_the_recovered_state_is_the_oracle_fold_of_the_journal(tmp_path: Path) -> None:
    await build(tmp_path, 5)
    journal = Journal.open(weft(tmp_path) / "weft.db", readonly=True)
    oracle = OracleCore()
    for page in journal.pages():
        for e in page:
            if e.kind == "transition":
                oracle.apply(e.payload.encode())
    assert json.loads(reopen(tmp_path).core.state_json()) == oracle.state_dict()


async def test_runs_left_running_are_marked_crashed_on_the_next_start(tmp_path: Path) -> None:
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    for event in lifecycle("r1", "c0")[:4]:  # leave c0 running
        manager.transition(event)
    await manager.flush()
    await manager.close()
    store.journal.close()  # no release: as if the process died (own pid: recycled-pid path)
    again = ExecutionStore.open(tmp_path)
    assert again.lock is not None
    assert again.lock.previous is not None
    manager = again.state_manager()
    assert await again.mark_crashed_runs(manager) == ["r1"]
    (run,) = again.runs()
    assert run["status"] == "crashed"
    assert run["codons"][0]["failureReason"]["message"] == "Server crashed"
    assert run["codons"][0]["failedDuring"] == "running"
    await again.close(manager)


async def test_a_snapshot_whose_tail_does_not_replay_loses(tmp_path: Path) -> None:
    # RunStarted is seq 1; c0 takes seqs 2..9 and completes at 9.
    state = await build(tmp_path, 1)
    path = weft(tmp_path) / "state.json"
    doc = json.loads(path.read_bytes())
    doc["journalSeq"] = 8  # yet the snapshot already holds seq 9's completion
    path.write_text(json.dumps(doc))
    (weft(tmp_path) / "state.json.bak").unlink()
    store = reopen(tmp_path)
    assert store.recovery.source == "journal"
    assert store.recovery.notes[0].startswith(
        "state.json disagrees with the journal at seq 9 (Codon 'c0' in run 'r1' is completed, "
        "not running)"
    )
    assert store.core.state_json() == state


class _LateReader:
    """A journal seen by a reader of a live execution: its end is read, then the
    writer commits more (the rows appear, ``last_seq`` first returned the old end)."""

    def __init__(self, journal: Journal, first_end: int) -> None:
        self._journal = journal
        self._ends = [first_end]

    def last_seq(self) -> int:
        return self._ends.pop() if self._ends else self._journal.last_seq()

    def __getattr__(self, name: str) -> object:
        return getattr(self._journal, name)


async def test_a_reader_of_a_live_execution_folds_to_the_end_it_read_first(
    tmp_path: Path,
) -> None:
    await build(tmp_path, 1)
    old_snapshot = (weft(tmp_path) / "state.json").read_bytes()
    await build_more(tmp_path)
    (weft(tmp_path) / "state.json").write_bytes(old_snapshot)
    journal = Journal.open(weft(tmp_path) / "weft.db", readonly=True)
    try:
        seen = journal.last_seq() - 3  # three more transitions committed after it was read
        found = recover(weft(tmp_path), _LateReader(journal, seen))  # type: ignore[arg-type]
    finally:
        journal.close()
    assert found.core.next_seq == seen + 1
    assert found.core.journal_seq == seen


async def test_a_snapshot_written_after_a_reader_read_the_end_is_no_loss(tmp_path: Path) -> None:
    state = await build(tmp_path, 2)
    journal = Journal.open(weft(tmp_path) / "weft.db", readonly=True)
    try:
        stale = _LateReader(journal, journal.last_seq() - 4)
        found = recover(weft(tmp_path), stale)  # type: ignore[arg-type]
    finally:
        journal.close()
    assert found.source == "state.json"
    assert found.core.state_json() == state


async def test_a_wrong_journal_seq_over_an_intact_journal_is_noted_and_the_journal_wins(
    tmp_path: Path,
) -> None:
    state = await build(tmp_path, 2)
    path = weft(tmp_path) / "state.json"
    doc = json.loads(path.read_bytes())
    last = doc["journalSeq"]
    doc["journalSeq"] = 10_000
    path.write_text(json.dumps(doc))
    for store in (reopen(tmp_path), ExecutionStore.open(tmp_path)):
        try:
            notes = store.recovery.notes
            assert notes[0] == (
                f"state.json says it reflects journal seq 10000 but the journal ends at {last}, "
                f"and what it holds is the journal's state at {last}: its journalSeq is wrong "
                "(or the rows gone changed no state); the journal wins"
            )
            assert store.recovery.source == "state.json.bak"
            assert store.core.state_json() == state
            assert store.core.next_seq == last + 1
        finally:
            if store.lock is not None:
                await store.close()
            else:
                store.journal.close()


async def test_an_edited_figure_in_state_json_is_noted_and_the_journal_wins(
    tmp_path: Path,
) -> None:
    state = await build(tmp_path, 2)
    for name in ("state.json", "state.json.bak"):
        path = weft(tmp_path) / name
        doc = json.loads(path.read_bytes())
        journaled = doc["runs"][0]["codons"][0]["finalCost"]
        doc["runs"][0]["codons"][0]["finalCost"] = 99.5
        path.write_text(json.dumps(doc))
    store = reopen(tmp_path)
    assert store.recovery.source == "journal"
    assert store.recovery.notes[0] == (
        f"state.json does not match the journal: runs[0].codons[0].finalCost is 99.5 in "
        f"state.json, {json.dumps(journaled)} in the journal; the journal wins"
    )
    assert store.recovery.notes[1].startswith("state.json.bak does not match the journal")
    assert store.core.state_json() == state
