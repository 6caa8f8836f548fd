"""The store under faults: a full disk and a fenced-off writer stop cleanly, keeping
everything committed before."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.builders import lifecycle, run_started
from tests.oracle import OracleCore

from weft.errors import LockLostError, PersistenceError
from weft.events.stream import AssistantActionEvent
from weft.state import Processed, StateManager
from weft.store import ExecutionStore, Journal
from weft.store.lock import LOCK
from weft.store.writer import SNAPSHOT_DUTY


@contextlib.contextmanager
def small_disk(path: Path) -> Iterator[bool]:
    """A 1 MiB tmpfs at ``path`` when this machine lets us mount one (yields True),
    else a plain folder (yields False: the caller limits the database instead)."""
    path.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


async def write_until_it_fails(manager: StateManager) -> None:
    for i in range(100_000):
        for event in lifecycle("r1", f"codon-{i}-{'x' * 200}"):
            manager.transition(event)
        manager.emit(
            AssistantActionEvent(codon_id="c", action="message", content="y" * 2000), run_id="r1"
        )
        await manager.flush()


def fold(journal: Journal) -> OracleCore:
    oracle = OracleCore()
    for page in journal.pages():
        for e in page:
            if e.kind == "transition":
                assert oracle.apply(e.payload.encode()).ok
    return oracle


async def test_a_full_disk_stops_the_run_cleanly_and_keeps_what_was_committed(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk") as mounted:
        execution = tmp_path / "disk" / "execution"
        store = ExecutionStore.open(execution)
        if not mounted:
            # SQLite's own "disk is full" path, when no filesystem can be filled.
            store.journal.execute_on_writers("PRAGMA max_page_count = 64")
        manager = store.state_manager(max_batch=200)
        seen: list[int] = []
        manager.add_listener(lambda p: seen.append(p.seq))
        manager.transition(run_started("r1"))
        with pytest.raises(PersistenceError) as failure:
            await write_until_it_fails(manager)
        message = str(failure.value)
        assert message.startswith("persisting transitions failed: ")
        assert "full" in message or "No space left" in message, message
        with pytest.raises(PersistenceError):
            manager.transition(run_started("r2"))  # the manager stopped
        assert len(seen) > 100, "nothing much was committed before the disk filled"

        journal = Journal.open(execution / ".weft" / "weft.db", readonly=True)
        try:
            assert journal.last_seq() >= seen[-1]
            assert journal.count() == journal.last_seq()
            oracle = fold(journal)
        finally:
            journal.close()
        again = ExecutionStore.open(execution, readonly=True)
        assert json.loads(again.core.state_json()) == oracle.state_dict()
        again.journal.close()
        store.journal.close()


async def test_a_fenced_off_writer_stops_before_writing(tmp_path: Path) -> None:
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    written: list[Processed] = []
    manager.add_listener(written.append)
    await manager.transition_and_wait(run_started("r1"))
    # Another process takes the execution over.
    (tmp_path / ".weft" / LOCK).write_text(
        json.dumps({"pid": 1, "lockId": "other", "startTime": "t", "lastHeartbeat": 0})
    )
    with pytest.raises(PersistenceError) as failure:
        await manager.transition_and_wait(lifecycle("r1", "c0")[0])
    assert isinstance(failure.value.__cause__, LockLostError)
    assert "fenced off" in str(failure.value)
    assert store.journal.last_seq() == 1
    assert [p.seq for p in written] == [1]
    store.journal.close()


async def test_state_json_is_rewritten_at_boundaries_for_a_small_share_of_the_time(
    tmp_path: Path,
) -> None:
    """Every codon boundary wants a rewrite (state.json current at each codon's
    start and end), but 400 codons a millisecond or two apart do not get 800:
    the boundary rewrites wait SNAPSHOT_DUTY times the last one's cost, so
    state.json takes a small share of the writer's time however fast codons come."""
    store = ExecutionStore.open(tmp_path / "execution")
    writer = store._writer_for()
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    await manager.flush()
    state = tmp_path / "execution" / ".weft" / "state.json"
    rewrites: list[int] = []
    spent = writer.snapshot_seconds
    started = time.monotonic()
    for i in range(400):
        before = writer.snapshots
        for event in lifecycle("r1", f"c{i}"):
            manager.transition(event)
        await manager.flush()
        if writer.snapshots > before:
            rewrites.append(state.stat().st_size)
    elapsed = time.monotonic() - started
    assert 8 <= len(rewrites) < 400 // 4
    # The duty bound keeps boundary rewrites to about 1/SNAPSHOT_DUTY of the time;
    # the byte rule's (early, small) and one fsync slower than the last add to it
    # on a busy machine: a quarter is far from a rewrite per boundary (over half).
    assert writer.snapshot_seconds - spent <= elapsed / 4
    await store.close(manager)
    # The final snapshot is the fold of the whole journal.
    doc = json.loads(state.read_text())
    assert len(doc["runs"][0]["codons"]) == 400


def statuses(state: Path) -> list[str]:
    """The codon statuses of the state.json file as written."""
    return [c["status"] for c in json.loads(state.read_text())["runs"][0]["codons"]]


async def test_a_codon_boundary_is_written_when_codons_are_seconds_apart(tmp_path: Path) -> None:
    """A codon's start and its end each leave state.json holding it, when the
    last rewrite is old enough (a real codon lasts seconds). The old writer
    skipped both while the journal since the last snapshot was smaller than it."""
    store = ExecutionStore.open(tmp_path / "execution")
    writer = store._writer_for()
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    await manager.flush()
    state = tmp_path / "execution" / ".weft" / "state.json"
    start, *rest = lifecycle("r1", "c0")
    time.sleep(max(0.05, SNAPSHOT_DUTY * writer._last_cost * 1.5))
    manager.transition(start)
    await manager.flush()
    assert [c["status"] for c in json.loads(state.read_text())["runs"][0]["codons"]] == [
        "preparing"
    ]
    time.sleep(max(0.05, SNAPSHOT_DUTY * writer._last_cost * 1.5))
    for event in rest:
        manager.transition(event)
    await manager.flush()
    assert [c["status"] for c in json.loads(state.read_text())["runs"][0]["codons"]] == [
        "completed"
    ]
    await store.close(manager)


def test_the_streamed_snapshot_is_the_snapshot_document(tmp_path: Path) -> None:
    """``write_snapshot_json`` writes exactly ``snapshot_json``'s bytes (a long
    run's snapshot is streamed to the file, never held whole)."""
    from weft.core import Core, encode

    core = Core()
    for event in [run_started("r1"), *(e for i in range(50) for e in lifecycle("r1", f"c{i}"))]:
        assert core.apply(encode(event)).ok
    path = tmp_path / "state.json.tmp"
    size = core.write_snapshot_json(path)
    assert path.read_bytes() == core.snapshot_json()
    assert size == path.stat().st_size > 10_000


def test_a_full_disk_fails_the_streamed_snapshot_with_enospc(tmp_path: Path) -> None:
    from weft.core import Core, encode

    core = Core()
    for event in [run_started("r1"), *(e for i in range(3000) for e in lifecycle("r1", f"c{i}"))]:
        assert core.apply(encode(event)).ok
    with small_disk(tmp_path / "disk") as mounted:
        if not mounted:
            pytest.skip("mounting a tmpfs needs root (CI runs as root)")
        with pytest.raises(OSError, match="space") as caught:
            core.write_snapshot_json(tmp_path / "disk" / "state.json.tmp")
        assert caught.value.errno == 28  # ENOSPC


async def test_a_timed_snapshot_is_never_ahead_of_the_journal(tmp_path: Path) -> None:
    """Between two commits the core may hold a batch not yet committed (the
    StateManager applies, then commits): the timer's snapshot is then not kept,
    since recovery would take state.json ahead of the journal for lost events."""
    from weft.core import encode

    store = ExecutionStore.open(tmp_path / "execution")
    writer = store._writer_for()
    manager = store.state_manager()
    await manager.transition_and_wait(run_started("r1"))
    await manager.flush()
    state = tmp_path / "execution" / ".weft" / "state.json"
    committed = json.loads(state.read_text())["journalSeq"]
    # The next batch, applied by the core and not committed (as the pump leaves
    # it while the commit waits for the writer thread).
    store.core.submit(encode(lifecycle("r1", "c0")[0]))
    assert store.core.drain()
    writer._tail, writer._last_snapshot = 1, 0.0  # the time bound is due
    writer._timed()
    assert json.loads(state.read_text())["journalSeq"] == committed
    assert not (tmp_path / "execution" / ".weft" / "state.json.tmp").exists()
    store.journal.close()
    writer.shutdown()
