"""Ending what a dead run left behind, and nothing else.

The decision (:func:`find_survivors`) is checked on process tables; the
I/O layer on real process groups: real ``sh`` and ``sleep`` processes, their
real ``/proc`` entries and signals, and a real journal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from weft.agents.process import die_with_parent
from weft.events.stream import ProcessEndedEvent, ProcessStartedEvent
from weft.runtime.run.survivors import (
    MARK_VAR,
    Candidate,
    ProcInfo,
    end_survivors,
    find_survivors,
    new_mark,
    open_groups,
    read_mark,
    read_stat,
    started_event,
)
from weft.store.journal import Journal

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def record(
    pid: int = 100, ticks: int | None = 500, mark: str = "m", boot: str = "b"
) -> ProcessStartedEvent:
    return ProcessStartedEvent(
        pid=pid, role="agent", command="x", mark=mark, start_ticks=ticks, boot_id=boot
    )


def proc(
    pid: int, pgid: int = 100, ticks: int = 600, mark: str | None = "m", zombie: bool = False
) -> tuple[int, Candidate]:
    return pid, Candidate(ProcInfo(pid, pgid, ticks, zombie), mark)


# --------------------------------------------------------------------------- the decision


def test_a_live_leader_with_the_journaled_start_time_takes_its_whole_group() -> None:
    table = dict([proc(100, ticks=500), proc(101, mark=None), proc(102, pgid=7)])
    assert find_survivors(record(), table, "b") == [100, 101]


def test_a_leader_pid_reused_by_another_process_is_never_signalled() -> None:
    table = dict([proc(100, ticks=900), proc(101)])
    assert find_survivors(record(), table, "b") == []
    assert find_survivors(record(ticks=None), table, "b") == []


def test_without_the_leader_only_marked_members_started_after_it_count() -> None:
    table = dict(
        [
            proc(100, ticks=500, zombie=True),
            proc(101),
            proc(102, mark="other"),
            proc(103, mark=None),
            proc(104, ticks=400),
            proc(105, zombie=True),
        ]
    )
    assert find_survivors(record(), table, "b") == [101]


def test_a_group_from_before_a_reboot_has_nothing_alive() -> None:
    assert find_survivors(record(boot="old"), dict([proc(100, ticks=500)]), "b") == []


# --------------------------------------------------------------------------- real processes


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started; whatever is left of their groups is killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def group(script: str, mark: str, spawned: list[subprocess.Popen[bytes]]) -> ProcessStartedEvent:
    child = subprocess.Popen(
        ["/bin/sh", "-c", script],
        start_new_session=True,
        env={**os.environ, MARK_VAR: mark},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    spawned.append(child)
    return started_event(
        child.pid, role="rig", argv=["/bin/sh", "-c", script], mark=mark, codon_id="c"
    )


def members(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        info = read_stat(int(name)) if name.isdigit() else None
        if info is not None and info.pgid == pgid and not info.zombie:
            out.append(info.pid)
    return out


def wait_members(pgid: int, n: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(found := members(pgid)) < n:
        assert time.monotonic() < deadline, f"group {pgid} never had {n} members"
        time.sleep(0.02)
    return found


async def test_a_dead_runs_group_is_ended_with_a_member_that_ignores_sigterm(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    mark = new_mark()
    rec = group("trap '' TERM; sleep 30 & sleep 30 & wait", mark, spawned)
    assert rec.start_ticks is not None
    wait_members(rec.pid, 3)
    assert read_mark(rec.pid) == mark

    started = time.monotonic()
    (ended,) = await end_survivors([rec], grace=0.3)
    assert ended.how == "ended"
    assert len(ended.pids) == 3
    assert members(rec.pid) == []
    assert time.monotonic() - started < 3


async def test_members_outlive_their_leader_and_are_found_by_their_mark(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    mark = new_mark()
    rec = group("sleep 30 & sleep 30 & exit 0", mark, spawned)
    spawned[-1].wait()  # the leader is gone (reaped); its children live on in its group
    orphans = wait_members(rec.pid, 2)
    assert rec.pid not in orphans

    (ended,) = await end_survivors([rec], grace=0.5)
    assert (ended.how, sorted(ended.pids)) == ("ended", sorted(orphans))
    assert members(rec.pid) == []


async def test_a_group_with_another_mark_is_left_alone(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    theirs = group("sleep 30 & sleep 30 & exit 0", new_mark(), spawned)
    spawned[-1].wait()
    alive = wait_members(theirs.pid, 2)
    claimed = msgspec.structs.replace(theirs, mark=new_mark())

    (ended,) = await end_survivors([claimed], grace=0.2)
    assert ended.how == "gone"
    assert sorted(members(theirs.pid)) == sorted(alive)


async def test_a_group_that_is_gone_is_reported_gone(
    spawned: list[subprocess.Popen[bytes]],
) -> None:
    rec = group("exit 0", new_mark(), spawned)
    spawned[-1].wait()
    (ended,) = await end_survivors([rec])
    assert ended.how == "gone"


def test_the_direct_child_dies_with_its_parent(tmp_path: Path) -> None:
    assert die_with_parent is not None
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from weft.agents.process import die_with_parent\n"
            "child = subprocess.Popen(['sleep', '30'], preexec_fn=die_with_parent)\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while (info := read_stat(child)) is not None and not info.zombie:
        assert time.monotonic() < deadline, "the child outlived its parent"
        time.sleep(0.02)


# --------------------------------------------------------------------------- the journal


def test_open_groups_are_the_started_ones_not_yet_ended(tmp_path: Path) -> None:
    journal = Journal.open(tmp_path / "weft.db")
    try:
        rows = []
        events = [
            record(pid=1, mark="a"),
            record(pid=2, mark="b"),
            ProcessEndedEvent(pid=1),
            record(pid=3, mark="c"),
        ]
        for seq, event in enumerate(events, start=1):
            payload = msgspec.json.encode({"type": event.TYPE, "data": event}).decode()
            rows.append((seq, f"id{seq}", "t", "event", event.TYPE, None, None, payload))
        rows.append((5, "id5", "t", "event", "info", None, None, '{"type":"info","data":{}}'))
        journal.append(rows)
        assert [g.mark for g in open_groups(journal)] == ["b", "c"]
    finally:
        journal.close()


def test_marks_are_unique_and_a_forked_child_draws_its_own() -> None:
    marks = {new_mark() for _ in range(10_000)}
    assert len(marks) == 10_000
    assert all(len(m) == 32 and int(m, 16) >= 0 for m in marks)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next marks, to the parent
        os.close(read)
        os.write(write, "".join(new_mark() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 1024).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    parent = "".join(new_mark() for _ in range(4))
    assert len(child) == 128
    assert child != parent, "the child repeats the parent's marks"
