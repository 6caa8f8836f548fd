"""Drain, with a real coordinator process: ``weft batch drain FILE`` or the first
Ctrl-C lets the running steps finish (their ends recorded), starts nothing new,
and the coordinator exits 3; ``weft batch run`` then finishes the rest. A second
Ctrl-C stops at once; a coordinator SIGKILLed mid-drain is resumed as any other."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.batch.support import assert_no_self_moves, write_batch
from tests.batch.test_cli import states, weft
from tests.runtime.hanks import subprocess_environment

from weft.batch.coordinator import DRAINED_EXIT
from weft.batch.store import BatchStore
from weft.errors import StoreError

STEP = 'echo ran >> "$WEFT_BATCH_STEP_DIR/runs"; sleep 4'
KEYS = [f"w{i}/s" for i in range(6)]


def _batch(tmp_path: Path) -> Path:
    doc = {
        "workstreams": [
            {"id": key.split("/")[0], "steps": [{"id": "s", "command": ["sh", "-c", STEP]}]}
            for key in KEYS
        ]
    }
    return write_batch(tmp_path, doc)


def _start(path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--workers", "2", "--headless"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _running(state_dir: Path) -> list[str]:
    """The steps recorded running with their pid (empty while the store is not there)."""
    try:
        with BatchStore.open(state_dir, writer=False) as store:
            steps = store.load().steps
    except StoreError:
        return []
    return [s.key for s in steps if s.state == "S_RUNNING" and s.pid is not None]


def _wait_for(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _runs(state_dir: Path) -> dict[str, int]:
    out = {}
    for key in KEYS:
        runs = state_dir / "steps" / key / "runs"
        out[key] = runs.read_text().count("ran") if runs.exists() else 0
    return out


def _finish_and_check(path: Path, state_dir: Path, env: dict[str, str]) -> None:
    """``weft batch run`` goes on after the drain: every step once, nothing twice."""
    done = weft(env, "run", str(path), "--workers", "2", "--headless", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    got = states(state_dir)
    assert all(got[key] == ("S_SUCCESS", 1) for key in KEYS), got
    assert _runs(state_dir) == dict.fromkeys(KEYS, 1)
    with BatchStore.open(state_dir, writer=False) as store:
        assert_no_self_moves(store)


def test_drain_from_another_terminal_finishes_the_running_steps_and_starts_nothing(
    tmp_path: Path,
) -> None:
    path = _batch(tmp_path)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    nothing = weft(env, "drain", str(path))
    assert nothing.returncode == 2, "no batch there yet"
    coordinator = _start(path, env)
    try:
        _wait_for(lambda: len(_running(state_dir)) == 2)
        running = _running(state_dir)
        drained = weft(env, "drain", str(path))
        assert drained.returncode == 0, drained.stdout + drained.stderr
        assert "draining: 2 running steps finish" in drained.stdout
        assert f"the coordinator then exits {DRAINED_EXIT}" in drained.stdout
        again = weft(env, "drain", str(path))
        assert again.returncode == 1
        assert "already draining" in again.stderr
        out, err = coordinator.communicate(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == DRAINED_EXIT, out + err
    assert f"go on with: weft batch run {path}" in err
    got = states(state_dir)
    for key in KEYS:
        if key in running:  # finished, and its end recorded
            assert got[key] == ("S_SUCCESS", 1), key
        else:  # none started after the drain
            assert got[key] == ("S_PENDING", 0), key
    with BatchStore.open(state_dir, writer=False) as store:
        notes = [n for n in store.notes() if n["subject"] == "batch"]
        ended = {t["step_id"] and f"{t['ws_id']}/{t['step_id']}" for t in store.transitions()}
    assert [n["metadata"]["reason"].split(":")[0] for n in notes] == [
        "drain requested (weft batch drain)",
        "drained",
    ]
    assert sorted(notes[0]["metadata"]["running"]) == sorted(running)
    assert "4 step(s) left to run" in notes[1]["metadata"]["reason"]
    assert ended - {None} == set(running)
    # With no coordinator, there is nothing to drain.
    idle = weft(env, "drain", str(path))
    assert idle.returncode == 1
    assert "no coordinator is running this batch" in idle.stderr
    _finish_and_check(path, state_dir, env)


def test_ctrl_c_drains_and_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    path = _batch(tmp_path)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    coordinator = _start(path, env)
    try:
        _wait_for(lambda: len(_running(state_dir)) == 2)
        coordinator.send_signal(signal.SIGINT)
        out, err = coordinator.communicate(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == DRAINED_EXIT, out + err
    assert "weft: draining" in err
    assert sorted(_runs(state_dir).values()) == [0, 0, 0, 0, 1, 1]

    # Again, and Ctrl-C twice: the second stops now, the running steps left to resume.
    coordinator = _start(path, env)
    try:
        _wait_for(lambda: len(_running(state_dir)) == 2)
        coordinator.send_signal(signal.SIGINT)
        time.sleep(0.3)
        coordinator.send_signal(signal.SIGINT)
        out, err = coordinator.communicate(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 128 + signal.SIGINT, out + err
    assert len(_running(state_dir)) == 2, "left S_RUNNING for the resume"
    _finish_and_check(path, state_dir, env)


def test_a_coordinator_killed_mid_drain_is_resumed_and_nothing_runs_twice(
    tmp_path: Path,
) -> None:
    path = _batch(tmp_path)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    coordinator = _start(path, env)
    try:
        _wait_for(lambda: len(_running(state_dir)) == 2)
        running = _running(state_dir)
        drained = weft(env, "drain", str(path))
        assert drained.returncode == 0, drained.stdout + drained.stderr
        coordinator.send_signal(signal.SIGKILL)  # mid-drain: its steps still run
        coordinator.wait(10)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert sorted(_running(state_dir)) == sorted(running), "left running, as any SIGKILL"
    _finish_and_check(path, state_dir, env)
    with BatchStore.open(state_dir, writer=False) as store:
        reasons = [n["metadata"]["reason"] for n in store.notes()]
    assert reasons.count("coordinator resumed: step adopted") == 2
