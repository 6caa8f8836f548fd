"""The runtime lock: one live process per execution, stale takeover, fencing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.builders import run_started

from weft.errors import LockHeldError, LockLostError
from weft.store import ExecutionStore
from weft.store.lock import LOCK, LockInfo, RuntimeLock, read_lock

ROOT = Path(__file__).resolve().parents[2]


def write_foreign_lock(
    weft_dir: Path, *, pid: int, heartbeat: float, start_time: str = "t"
) -> None:
    weft_dir.mkdir(parents=True, exist_ok=True)
    info = LockInfo(
        pid=pid, lock_id="someone-else", start_time=start_time, last_heartbeat=heartbeat
    )
    (weft_dir / LOCK).write_text(
        json.dumps(
            {
                "pid": info.pid,
                "lockId": info.lock_id,
                "startTime": info.start_time,
                "lastHeartbeat": heartbeat,
            }
        )
    )


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_live_lock_refuses_a_second_instance(tmp_path: Path) -> None:
    # A live process that is not us, with a fresh heartbeat.
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        write_foreign_lock(tmp_path, pid=holder.pid, heartbeat=1000.0)
        with pytest.raises(LockHeldError) as err:
            RuntimeLock.acquire(tmp_path, clock=lambda: 1010.0)
        assert f"Weft is already running on this execution (PID {holder.pid})" in str(err.value)
    finally:
        holder.kill()
        holder.wait()


def test_a_dead_owner_is_taken_over_and_said(tmp_path: Path) -> None:
    pid = dead_pid()
    write_foreign_lock(tmp_path, pid=pid, heartbeat=1000.0)
    lock = RuntimeLock.acquire(tmp_path, clock=lambda: 1001.0)
    assert lock.previous is not None
    assert lock.describe_previous() == (f"took over the lock of PID {pid}: its process is gone")
    on_disk = read_lock(tmp_path / LOCK)
    assert on_disk is not None
    assert (on_disk.pid, on_disk.lock_id) == (os.getpid(), lock.info.lock_id)


def test_a_live_pid_with_a_stale_heartbeat_may_be_hung_and_keeps_the_lock(
    tmp_path: Path,
) -> None:
    """Seed 001 reads the pid and the heartbeat. A process that lives but
    stopped beating (a run stuck in a long computation) is not declared
    crashed: a second writer on its journal would be worse. Before, the lock
    was taken over on the heartbeat alone."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        write_foreign_lock(tmp_path, pid=holder.pid, heartbeat=1000.0)
        with pytest.raises(LockHeldError, match="already running"):
            RuntimeLock.acquire(tmp_path, clock=lambda: 1119.0)
        with pytest.raises(LockHeldError) as err:
            RuntimeLock.acquire(tmp_path, clock=lambda: 1121.0)
        said = str(err.value)
        assert f"PID {holder.pid} holds this execution's lock and lives" in said
        assert "121 s: it may be hung" in said
        assert f"kill {holder.pid}" in said
        assert read_lock(tmp_path / LOCK).lock_id == "someone-else"  # type: ignore[union-attr]
    finally:
        holder.kill()
        holder.wait()
    # Once it is stopped, the lock is taken over at once.
    lock = RuntimeLock.acquire(tmp_path, clock=lambda: 1122.0)
    assert lock.previous is not None
    assert lock.previous.reason == "its process is gone"


def test_a_recycled_pid_that_started_after_the_lock_does_not_hold_it(tmp_path: Path) -> None:
    """The lock's pid now names another process, started after the lock was
    written (a reboot, a long-dead run): the lock is taken over."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        long_ago = "2020-01-01T00:00:00.000+00:00"
        write_foreign_lock(tmp_path, pid=other.pid, heartbeat=1000.0, start_time=long_ago)
        lock = RuntimeLock.acquire(tmp_path, clock=lambda: 1010.0)  # heartbeat fresh, too
        assert lock.previous is not None
        assert lock.previous.reason == (
            f"its pid {other.pid} now names a process started after the lock"
        )
    finally:
        other.kill()
        other.wait()


def test_each_acquisition_draws_a_new_lock_id_and_release_removes_only_ours(
    tmp_path: Path,
) -> None:
    first = RuntimeLock.acquire(tmp_path)
    first_id = first.info.lock_id
    first.release()
    assert not (tmp_path / LOCK).exists()
    second = RuntimeLock.acquire(tmp_path)
    assert second.info.lock_id != first_id
    first.release()  # not ours any more: must not remove the new owner's file
    assert (tmp_path / LOCK).exists()


def test_fencing_a_takeover_is_noticed_before_the_next_write(tmp_path: Path) -> None:
    mine = RuntimeLock.acquire(tmp_path)
    mine.verify()
    write_foreign_lock(tmp_path, pid=os.getpid() + 1, heartbeat=0.0)
    with pytest.raises(LockLostError, match="fenced off"):
        mine.verify()
    with pytest.raises(LockLostError):
        mine.heartbeat()
    (tmp_path / LOCK).unlink()
    with pytest.raises(LockLostError, match="was removed"):
        mine.verify()


def test_heartbeat_and_update_rewrite_the_file(tmp_path: Path) -> None:
    now = [100.0]
    lock = RuntimeLock.acquire(tmp_path, clock=lambda: now[0])
    now[0] = 130.0
    lock.heartbeat()
    lock.update(run_id="r1", port=8123)
    info = read_lock(tmp_path / LOCK)
    assert info is not None
    assert (info.last_heartbeat, info.run_id, info.port) == (130.0, "r1", 8123)
    lock.verify()  # our own writes are not a takeover


@pytest.mark.parametrize(
    "data", [b"{torn", b'{"pid": 1, "lockId": "\xca\xff"}'], ids=["json", "utf8"]
)
def test_an_unreadable_lock_fails_closed_with_advice(tmp_path: Path, data: bytes) -> None:
    (tmp_path / LOCK).write_bytes(data)
    with pytest.raises(LockHeldError, match="delete the file"):
        RuntimeLock.acquire(tmp_path)


def test_two_processes_contending_get_exactly_one_lock(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from weft.store.lock import RuntimeLock\n"
        "from weft.errors import LockHeldError\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "try:\n"
        "    RuntimeLock.acquire(Path(sys.argv[1]))\n"
        "    print('got', flush=True)\n"
        "    time.sleep(2)\n"
        "except LockHeldError as e:\n"
        "    print('refused', e, flush=True)\n"
    )
    import time

    start = str(time.time() + 1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path), start],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    outputs = [c.communicate(timeout=30)[0] for c in children]
    assert sorted(o.split()[0] for o in outputs) == ["got", "refused", "refused", "refused"]
    assert all("Weft is already running" in o for o in outputs if o.startswith("refused"))


async def test_an_open_store_keeps_its_lock_alive(tmp_path: Path) -> None:
    import asyncio

    from weft.store import ExecutionStore

    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager(heartbeat_every=0.05)
    first = read_lock(tmp_path / ".weft" / LOCK)
    await asyncio.sleep(0.3)
    later = read_lock(tmp_path / ".weft" / LOCK)
    assert first is not None
    assert later is not None
    assert later.last_heartbeat > first.last_heartbeat
    assert later.lock_id == first.lock_id
    await store.close(manager)
    assert not (tmp_path / ".weft" / LOCK).exists()


async def test_the_lock_names_the_run_that_started(tmp_path: Path) -> None:
    store = ExecutionStore.open(tmp_path)
    manager = store.state_manager()
    manager.transition(run_started("r1"))
    await manager.flush()
    on_disk = read_lock(tmp_path / ".weft" / LOCK)
    assert on_disk is not None
    assert on_disk.run_id == "r1"
    await store.close(manager)


def test_opening_a_store_says_the_takeover_of_a_dead_holder(tmp_path: Path) -> None:
    pid = dead_pid()
    weft_dir = tmp_path / ".weft"
    write_foreign_lock(weft_dir, pid=pid, heartbeat=1000.0)
    doc = json.loads((weft_dir / LOCK).read_text())
    (weft_dir / LOCK).write_text(json.dumps({**doc, "runId": "r7"}))
    store = ExecutionStore.open(tmp_path)
    try:
        assert store.startup_notes()[0] == (
            f"took over the lock of PID {pid} (run r7): its process is gone"
        )
    finally:
        store.journal.close()
        assert store.lock is not None
        store.lock.release()
