"""The execution store: marking the runs a dead process left running as crashed.

A crashed run ends at its last sign of life, not when the next start finds it
dead: the downtime in between is no wall time of the run (``--max-time``
counts the wall time of every run from its ``startTime`` to its ``endTime``).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.builders import lifecycle, run_started

from weft import core
from weft.clock import iso_from_ms
from weft.events.stream import InfoEvent
from weft.store import ExecutionStore, Journal
from weft.store.execution import crash_end_ms
from weft.store.lock import LOCK, read_lock


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ms(stamp: str) -> int:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return round((moment - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1000)


async def die_running(execution: Path, *, start_ms: int, codon_start_ms: int) -> str:
    """Run r1 with codon c0 running when its process dies (the lock is never
    released); returns the submission time of r1's last journaled event."""
    store = ExecutionStore.open(execution)
    manager = store.state_manager()
    manager.transition(msgspec.structs.replace(run_started("r1"), start_time=iso_from_ms(start_ms)))
    started, *moves = lifecycle("r1", "c0")[:4]
    assert isinstance(started, core.CodonStarted)
    manager.transition(msgspec.structs.replace(started, start_time=iso_from_ms(codon_start_ms)))
    for event in moves:
        manager.transition(event)
    await manager.flush()
    await manager.close()
    store.journal.close()  # no release: as if the process died (own pid: recycled-pid path)
    journal = Journal.open(execution / ".weft" / "weft.db", readonly=True)
    try:
        return [e for page in journal.pages() for e in page if e.run_id == "r1"][-1].timestamp
    finally:
        journal.close()


def set_heartbeat(execution: Path, *, at_ms: int, run_id: str | None) -> None:
    """Rewrites the dead holder's lock as if its last heartbeat was at ``at_ms``."""
    path = execution / ".weft" / LOCK
    info = read_lock(path)
    assert info is not None
    path.write_bytes(
        msgspec.json.encode(
            msgspec.structs.replace(info, last_heartbeat=at_ms / 1000, run_id=run_id)
        )
    )


async def mark(execution: Path, *, detected_ms: int | None = None) -> dict[str, Any]:
    """Opens the store as the next start does and marks the dead run crashed
    (found dead at ``detected_ms``, else now); returns the run."""
    store = ExecutionStore.open(execution)
    manager = store.state_manager()
    if detected_ms is None:
        crashed = await store.mark_crashed_runs(manager)
    else:
        crashed = await store.mark_crashed_runs(manager, clock=lambda: detected_ms / 1000)
    assert crashed == ["r1"]
    (run,) = store.runs()
    await store.close(manager)
    assert run["status"] == "crashed"
    (codon,) = run["codons"]
    assert (codon["status"], codon["failedDuring"]) == ("failed", "running")
    # The active codon fails at the very time the run ends.
    assert codon["endTime"] == run["endTime"]
    return run


async def test_a_crashed_run_ends_at_its_last_event_not_when_found_dead(tmp_path: Path) -> None:
    now = now_ms()
    last = await die_running(tmp_path, start_ms=now, codon_start_ms=now)
    await asyncio.sleep(1.5)  # the downtime before the next start
    run = await mark(tmp_path)
    # The dead holder's heartbeat (taken when it started) is older than its
    # last event, so the event is the last sign of life.
    assert run["endTime"] == last
    assert ms(run["endTime"]) - ms(run["startTime"]) < 1000  # not the 1.5 s of downtime
    # When the crash was found is still journaled: the RunCrashed row's own time.
    journal = Journal.open(tmp_path / ".weft" / "weft.db", readonly=True)
    (crashed,) = journal.of_types(["RunCrashed"])
    journal.close()
    assert ms(crashed.timestamp) - ms(last) >= 1500


async def test_a_heartbeat_newer_than_the_last_event_ends_the_run(tmp_path: Path) -> None:
    # The agent worked silently: the process kept beating after its last event.
    now = now_ms()
    last = await die_running(tmp_path, start_ms=now, codon_start_ms=now)
    set_heartbeat(tmp_path, at_ms=ms(last) + 20_000, run_id="r1")
    run = await mark(tmp_path, detected_ms=ms(last) + 600_000)
    assert ms(run["endTime"]) == ms(last) + 20_000


@pytest.mark.parametrize("holder_run", [None, "r0"])
async def test_the_heartbeat_of_a_lock_naming_another_run_is_ignored(
    tmp_path: Path, holder_run: str | None
) -> None:
    # A holder that ran no run, or another one, says nothing of r1's life.
    now = now_ms()
    last = await die_running(tmp_path, start_ms=now, codon_start_ms=now)
    set_heartbeat(tmp_path, at_ms=ms(last) + 20_000, run_id=holder_run)
    run = await mark(tmp_path, detected_ms=ms(last) + 600_000)
    assert run["endTime"] == last


async def test_what_this_process_journals_about_the_dead_run_proves_nothing(
    tmp_path: Path,
) -> None:
    # Only rows the journal held when the store was opened are the dead process's.
    now = now_ms()
    last = await die_running(tmp_path, start_ms=now, codon_start_ms=now)
    await asyncio.sleep(0.3)
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    manager.emit(InfoEvent(message="a note about r1"), run_id="r1")
    await manager.flush()
    found = ms(last) + 600_000
    assert await store.mark_crashed_runs(manager, clock=lambda: found / 1000) == ["r1"]
    (run,) = store.runs()
    await store.close(manager)
    assert run["endTime"] == last


async def test_the_end_is_never_after_the_crash_was_found(tmp_path: Path) -> None:
    # A dead process whose clock ran ahead beat "in the future".
    now = now_ms()
    last = await die_running(tmp_path, start_ms=now, codon_start_ms=now)
    set_heartbeat(tmp_path, at_ms=ms(last) + 3_600_000, run_id="r1")
    run = await mark(tmp_path, detected_ms=ms(last) + 60_000)
    assert ms(run["endTime"]) == ms(last) + 60_000


async def test_the_end_is_never_before_the_run_or_its_codon_started(tmp_path: Path) -> None:
    # Stamps later than every sign of life (a clock stepped back meanwhile):
    # the run ends no earlier than the newest time its state holds.
    now = now_ms()
    await die_running(tmp_path, start_ms=now + 60_000, codon_start_ms=now + 90_000)
    run = await mark(tmp_path, detected_ms=now + 600_000)
    assert ms(run["endTime"]) == now + 90_000
    assert ms(run["endTime"]) >= ms(run["startTime"])


def test_without_any_sign_of_life_the_run_ends_when_found_dead() -> None:
    # Nothing known (no row of the run inherited, no lock naming it): the
    # detection time stands, as before; stamps that are no times bound nothing.
    run = {"startTime": "2026-11-21T00:00:00Z", "codons": [{"startTime": "t"}]}
    found = ms("2026-11-21T00:10:00.000Z")
    end = crash_end_ms(run, last_journaled=None, last_heartbeat=None, detected_ms=found)
    assert end == found
    end = crash_end_ms(run, last_journaled="?", last_heartbeat=None, detected_ms=found)
    assert end == found
