"""A damaged batch store is refused, never silently restarted; ``weft batch
rebuild`` makes it again from what the step folders prove. Real coordinators
(killed with SIGKILL mid-batch), real SQLite, real damage, through the CLI.

The batch (7 command steps): ``done/a -> done/b`` and ``x/a`` finish at once;
``slow/s`` and ``idle/a`` wait for a ``release`` file, ``slow/t -> slow/u``
follow ``slow/s``. The coordinator is SIGKILLed (and the two waiting steps
with it) once 3 steps have finished: every commit is still in the WAL. Every
step appends a line to its folder's ``runs`` file, so a step run twice shows.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.batch.support import write_batch
from tests.batch.test_cli import _step_row, states, weft
from tests.runtime.hanks import subprocess_environment

from weft.batch.engine import launch_spec
from weft.batch.store import BatchStore

SECRET = "sekrit-4c1d-value"
MARK = 'echo "ran $TOKEN" >> "$WEFT_BATCH_STEP_DIR/runs"'
WAIT = MARK + '; while [ ! -e "$WEFT_BATCH_STEP_DIR/../../../../../release" ]; do sleep 0.05; done'
FINISHED = ("done/a", "done/b", "x/a")
STATE = Path(".weft-batch") / "batch"


def _doc() -> dict[str, object]:
    def step(step_id: str, script: str, *deps: str, **extra: object) -> dict[str, object]:
        return {"id": step_id, "command": ["sh", "-c", script], "depends_on": list(deps), **extra}

    return {
        "workstreams": [
            {
                "id": "done",
                "steps": [step("a", MARK, env={"TOKEN": SECRET}), step("b", MARK, "a")],
            },
            {"id": "x", "steps": [step("a", MARK)]},
            {"id": "slow", "steps": [step("s", WAIT), step("t", MARK, "s"), step("u", MARK, "t")]},
            {"id": "idle", "steps": [step("a", WAIT)]},
        ]
    }


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch whose coordinator was SIGKILLed with 3 steps finished and 2 waiting
    (their processes killed too): the store's commits are all in its WAL."""
    root = tmp_path_factory.mktemp("killed")
    path = write_batch(root, _doc())
    state_dir = root / STATE
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--workers", "2", "--headless"],
        env=subprocess_environment(root),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = [_step_row(state_dir, key) for key in (*FINISHED, "slow/s", "idle/a")]
            finished = all(r is not None and r.state == "S_SUCCESS" for r in rows[:3])
            if finished and all(r is not None and r.pid is not None for r in rows[3:]):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the batch never reached 3 finished steps and 2 waiting")
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    # Not read from the store again: a reader closing it last would fold the WAL.
    for row in rows[3:]:
        os.killpg(row.pid, signal.SIGKILL)  # the wrapper writes no exit file: lost
    time.sleep(0.2)
    assert (state_dir / "batch.db-wal").stat().st_size > 0, "the commits are in the WAL"
    return root


@pytest.fixture
def batch(killed: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of the killed batch of its own; its batch file. Steps it leaves
    running (a failed test) are stopped."""
    root = tmp_path / "b"
    shutil.copytree(killed, root)
    yield root / "batch.json"
    (root / "release").touch()
    for pid_file in (root / STATE / "steps").glob("*/*/exit.pid"):
        spec = launch_spec(
            f"{pid_file.parent.parent.name}/{pid_file.parent.name}",
            {"command": ["true"], "cwd": "."},
            root / STATE,
        )
        pid = spec.wrapper_pid()
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)


def _folders(state_dir: Path) -> dict[str, tuple[str, ...]]:
    """Each step folder's ``runs`` and ``exit`` contents with their mtimes."""
    out = {}
    for step_dir in sorted((state_dir / "steps").glob("*/*")):
        seen = []
        for name in ("runs", "exit"):
            file = step_dir / name
            if file.exists():
                seen += [name, file.read_text(), str(file.stat().st_mtime_ns)]
        out[f"{step_dir.parent.name}/{step_dir.name}"] = tuple(seen)
    return out


def _sql(state_dir: Path, *statements: str) -> None:
    # Through SQLite, as a hand edit would be; closing folds the WAL into the file.
    conn = sqlite3.connect(state_dir / "batch.db", isolation_level=None)
    for statement in ("SELECT COUNT(*) FROM sqlite_master", *statements):
        conn.execute(statement)
    conn.close()


def _fold(state_dir: Path) -> None:
    _sql(state_dir)
    assert not (state_dir / "batch.db-wal").exists()


def _delete(state_dir: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (state_dir / f"batch.db{suffix}").unlink()


def _empty(state_dir: Path) -> None:
    (state_dir / "batch.db").write_bytes(b"")


def _truncate(state_dir: Path) -> None:
    _fold(state_dir)
    db = state_dir / "batch.db"
    size = db.stat().st_size
    assert size >= 4 * 4096, size
    os.truncate(db, size // 2 // 4096 * 4096)  # whole pages: only the header can tell


def _garble_wal(state_dir: Path) -> None:
    wal = state_dir / "batch.db-wal"
    with wal.open("r+b") as fh:
        fh.seek(32 + (24 + 4096) * 2 + 24 + 100)  # inside the third frame's page
        fh.write(b"\xde\xad\xbe\xef" * 8)


def _delete_wal(state_dir: Path) -> None:
    (state_dir / "batch.db-wal").unlink()


def _delete_wal_and_shm(state_dir: Path) -> None:
    (state_dir / "batch.db-wal").unlink()
    (state_dir / "batch.db-shm").unlink()


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "deleted": (_delete, "batch.db is missing, but steps/done/a"),
    "emptied": (_empty, "batch.db is empty (0 bytes), but steps/done/a"),
    "truncated": (_truncate, "batch.db is truncated"),
    "wal garbled": (_garble_wal, "its write-ahead log batch.db-wal is damaged: the frame at byte"),
    "wal deleted": (_delete_wal, "its write-ahead log batch.db-wal is missing"),
    "wal and shm deleted": (_delete_wal_and_shm, "batch.db holds no batch (no tables), but"),
    "step row deleted": (
        lambda d: _sql(d, "DELETE FROM steps WHERE ws_id = 'done' AND step_id = 'a'"),
        "the step done/a row is gone",
    ),
    "state edited to S_BOGUS": (
        lambda d: _sql(d, "UPDATE steps SET state = 'S_BOGUS' WHERE ws_id = 'x'"),
        "step x/a is in the unknown state 'S_BOGUS'",
    ),
    "state edited against the audit": (
        lambda d: _sql(d, "UPDATE steps SET state = 'S_PENDING' WHERE ws_id = 'x'"),
        "step x/a is S_PENDING, but its audit trail leaves it S_SUCCESS",
    ),
    "audit trail emptied": (
        lambda d: _sql(d, "DELETE FROM state_transitions", "DELETE FROM breaker_transitions"),
        "the audit trail (state_transitions, breaker_transitions) has 0 rows, but",
    ),
    "audit row edited": (
        lambda d: _sql(d, "UPDATE state_transitions SET metadata = NULL WHERE transition_id = 2"),
        "the audit trail was edited",
    ),
    "unknown schema version": (
        lambda d: _sql(d, "PRAGMA user_version = 999"),
        "its schema version (PRAGMA user_version) is 999",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_store_is_refused_by_resume_and_status_and_nothing_runs(
    batch: Path, damage: str
) -> None:
    state_dir = batch.parent / STATE
    env = subprocess_environment(batch.parent)
    harm, found = DAMAGE[damage]
    before = _folders(state_dir)
    assert [before[k][1] for k in FINISHED] == [f"ran {SECRET}\n", "ran \n", "ran \n"]
    harm(state_dir)
    (batch.parent / "release").touch()  # were anything launched, it would finish
    for command in ("resume", "status"):
        args = [command, str(batch)] + (
            ["--workers", "2", "--headless"] if command == "resume" else []
        )
        done = weft(env, *args, timeout=60)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        assert "is damaged: " in done.stderr, done.stderr
        assert found in done.stderr, done.stderr
        assert f"weft batch rebuild {batch}" in done.stderr, "the way forward"
    assert _folders(state_dir) == before, "no step ran again"


@pytest.mark.parametrize(
    "damage", ["deleted", "wal garbled", "step row deleted", "audit trail emptied"]
)
def test_rebuild_keeps_the_finished_steps_and_resume_runs_only_the_rest(
    batch: Path, damage: str
) -> None:
    state_dir = batch.parent / STATE
    env = subprocess_environment(batch.parent)
    before = _folders(state_dir)
    DAMAGE[damage][0](state_dir)
    rebuilt = weft(env, "rebuild", str(batch))
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "rebuilt: 3 step(s) proven finished and kept (done/a, done/b, x/a)" in rebuilt.stdout
    assert "2 launched before without a proven success will run again" in rebuilt.stdout
    kept = [p.name for p in state_dir.iterdir() if p.name.startswith("damaged-")]
    assert len(kept) == (damage != "deleted"), "the damaged files are kept, if any"
    again = weft(env, "rebuild", str(batch))
    assert again.returncode == 0
    assert "is sound; nothing to rebuild" in again.stdout

    (batch.parent / "release").touch()
    done = weft(env, "resume", str(batch), "--workers", "2", "--headless", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    after = _folders(state_dir)
    for key in FINISHED:
        assert after[key] == before[key], f"{key} ran again"
    got = states(state_dir)
    assert {k: got[k] for k in FINISHED} == dict.fromkeys(FINISHED, ("S_SUCCESS", 1))
    for key in ("slow/s", "idle/a"):
        assert after[key][1] == "ran \nran \n", f"{key}: lost with its coordinator, run again"
    for key in ("slow/t", "slow/u"):
        assert after[key][1] == "ran \n"
    assert all(got[ws] == "S_SUCCESS" for ws in ("done", "x", "slow", "idle"))


def test_a_sigkilled_coordinator_resumes_and_no_finished_step_runs_twice(batch: Path) -> None:
    state_dir = batch.parent / STATE
    env = subprocess_environment(batch.parent)
    before = _folders(state_dir)
    (batch.parent / "release").touch()
    done = weft(env, "resume", str(batch), "--workers", "2", "--headless", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    after = _folders(state_dir)
    for key in FINISHED:
        assert after[key] == before[key], f"{key} ran again"
    got = states(state_dir)
    assert got["slow/s"] == ("S_SUCCESS", 2)
    assert got["idle/a"] == ("S_SUCCESS", 2)
    assert after["slow/s"][1] == "ran \nran \n"
    assert got["slow/u"] == ("S_SUCCESS", 1)


def test_step_env_values_never_reach_the_store_and_its_files_are_private(batch: Path) -> None:
    state_dir = batch.parent / STATE
    assert (state_dir / "steps" / "done" / "a" / "runs").read_text() == f"ran {SECRET}\n"
    store_files = [state_dir / f"batch.db{s}" for s in ("", "-wal", "-shm")]
    for file in store_files:
        assert SECRET.encode() not in file.read_bytes(), file.name
    for file in [*store_files, state_dir / "batch.lock", state_dir / "step-env.json"]:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file.name
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    with BatchStore.open(state_dir, writer=False) as store:  # closing it folds the WAL
        plan = next(s.plan for s in store.load().steps if s.key == "done/a")
    assert plan["env"] == {"TOKEN": "***"}, "the name is kept, the value masked"

    # A resume reads the value back for the launch, and still writes none of it.
    (batch.parent / "release").touch()
    env = subprocess_environment(batch.parent)
    done = weft(env, "resume", str(batch), "--workers", "2", "--headless", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert SECRET.encode() not in (state_dir / "batch.db").read_bytes()
    assert stat.S_IMODE((state_dir / "batch.db").stat().st_mode) == 0o600


def test_a_store_made_with_open_permissions_is_made_private(tmp_path: Path) -> None:
    path = write_batch(
        tmp_path, {"workstreams": [{"id": "w", "steps": [{"id": "s", "command": ["true"]}]}]}
    )
    env = subprocess_environment(tmp_path)
    state_dir = tmp_path / STATE
    assert weft(env, "run", str(path), "--headless").returncode == 0
    for file in (state_dir / "batch.db", state_dir / "batch.lock"):
        file.chmod(0o644)
    state_dir.chmod(0o755)
    assert weft(env, "run", str(path), "--headless").returncode == 0
    assert stat.S_IMODE((state_dir / "batch.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((state_dir / "batch.lock").stat().st_mode) == 0o600
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
