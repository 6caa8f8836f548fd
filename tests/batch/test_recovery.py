"""Recovery procedures end to end: a SIGKILLed coordinator in the middle of an
in-process hank step (the execution resumes), ``--isolate``, Recovery 4's check."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.batch.support import write_batch
from tests.batch.test_cli import _step_row, states, weft
from tests.runtime.hanks import subprocess_environment

ROOT = Path(__file__).resolve().parents[2]
HANK = ROOT / "examples" / "batch" / "hank"
DATA = ROOT / "examples" / "batch" / "data" / "alpha"


def hank_batch(tmp_path: Path) -> Path:
    step = {"id": "analyse", "hank": str(HANK), "data": str(DATA)}
    # The example's hank and data are outside tmp_path: named absolute, by choice.
    doc = {"allow_absolute_paths": True, "workstreams": [{"id": "w", "steps": [step]}]}
    return write_batch(tmp_path, doc)


def test_a_hank_step_killed_with_its_coordinator_resumes_its_execution(tmp_path: Path) -> None:
    path = hank_batch(tmp_path)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    # The fake agent writes slowly in the first coordinator, so the step is surely
    # still running when it is killed (at full speed it can finish in 0.3 s).
    slow = {**env, "FAKE_AGENT_LINE_DELAY_MS": "150"}
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--headless"],
        env=slow,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = state_dir / "steps" / "w" / "analyse" / "execution" / ".weft" / "weft.db"
    try:
        deadline = time.monotonic() + 30
        while not journal.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert journal.exists(), "the step's execution never started"
        time.sleep(0.3)
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    row = _step_row(state_dir, "w/analyse")
    assert row.state == "S_RUNNING"
    done = weft(env, "resume", str(path), "--headless")
    assert done.returncode == 0, done.stdout + done.stderr
    assert states(state_dir)["w/analyse"] == ("S_SUCCESS", 2)
    row = _step_row(state_dir, "w/analyse")
    assert row.cost_usd > 0


def test_isolate_runs_the_hank_as_its_own_weft_run(tmp_path: Path) -> None:
    path = hank_batch(tmp_path)
    done = weft(subprocess_environment(tmp_path), "run", str(path), "--headless", "--isolate")
    assert done.returncode == 0, done.stdout + done.stderr
    state_dir = tmp_path / ".weft-batch" / "batch"
    log = (state_dir / "steps" / "w" / "analyse" / "step.log").read_text()
    assert " -m weft run " in log
    assert "Run completed (exit 0)" in log
    assert _step_row(state_dir, "w/analyse").cost_usd > 0


def test_status_refuses_contradicting_states_recovery_4(tmp_path: Path) -> None:
    path = write_batch(
        tmp_path, {"workstreams": [{"id": "w", "steps": [{"id": "s", "command": ["true"]}]}]}
    )
    env = subprocess_environment(tmp_path)
    assert weft(env, "run", str(path), "--headless").returncode == 0
    db = tmp_path / ".weft-batch" / "batch" / "batch.db"
    with sqlite3.connect(db) as conn:  # what the seed calls manual state modification
        conn.execute("UPDATE steps SET state = 'S_FAILED'")
    # The audit trail tells the edit from a move the machines made: refused.
    status = weft(env, "status", str(path))
    assert status.returncode == 2
    assert "step w/s is S_FAILED, but its audit trail leaves it S_SUCCESS" in status.stderr


def test_address_without_the_ray_engine_is_a_usage_error(tmp_path: Path) -> None:
    path = write_batch(
        tmp_path, {"workstreams": [{"id": "w", "steps": [{"id": "s", "command": ["true"]}]}]}
    )
    done = weft(subprocess_environment(tmp_path), "run", str(path), "--address", "x:1")
    assert done.returncode == 2
    assert done.stderr.strip() == "weft: error: --address goes with --engine ray"


def test_repeated_sigkills_never_run_a_step_twice(tmp_path: Path) -> None:
    """Torture: the coordinator is SIGKILLed again and again while steps run;
    each resume adopts what still runs. Every step runs exactly once and the
    audit trail still replays to the stored states."""
    body = 'sleep 0.4; echo ran >> "$WEFT_BATCH_STEP_DIR/runs"'
    steps = [{"id": f"s{i}", "command": ["sh", "-c", body]} for i in range(4)]
    for i in range(4, 8):
        steps.append({"id": f"s{i}", "command": ["sh", "-c", body], "depends_on": [f"s{i - 4}"]})
    path = write_batch(tmp_path, {"workstreams": [{"id": "w", "steps": steps}]})
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    argv = [sys.executable, "-m", "weft", "batch", "resume", str(path), "--workers", "3",
            "--headless"]  # fmt: skip
    launched_before = 0
    for _ in range(3):
        coordinator = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            # Kill it just after it launched something new.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _launches(state_dir) <= launched_before:
                time.sleep(0.02)
            launched_before = _launches(state_dir)
            coordinator.send_signal(signal.SIGKILL)
            coordinator.wait(10)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
    done = weft(env, *argv[4:], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    got = states(state_dir)
    assert got["w"] == "S_SUCCESS"
    for i in range(8):
        assert got[f"w/s{i}"] == ("S_SUCCESS", 1)
        assert (state_dir / "steps" / "w" / f"s{i}" / "runs").read_text() == "ran\n"
    from tests.batch.test_scheduler import _audit_replays_to_the_rows

    from weft.batch.store import BatchStore

    with BatchStore.open(state_dir, writer=False) as store:
        _audit_replays_to_the_rows(store)
        reasons = [t["metadata"].get("reason") for t in store.transitions()]
        reasons += [n["metadata"].get("reason") for n in store.notes()]
    assert "coordinator resumed: step adopted" in reasons
    assert not any("process lost" in (r or "") for r in reasons)


def _launches(state_dir: Path) -> int:
    from weft.batch.store import BatchStore
    from weft.errors import StoreError

    try:
        with BatchStore.open(state_dir, writer=False) as store:
            return sum(s.launches for s in store.load().steps)
    except StoreError:
        return 0


def test_sigterm_stops_the_coordinator_gracefully_and_resume_finishes(tmp_path: Path) -> None:
    path = hank_batch(tmp_path)
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    # The fake agent writes slowly in the first coordinator, so the step is surely
    # still running when it is killed (at full speed it can finish in 0.3 s).
    slow = {**env, "FAKE_AGENT_LINE_DELAY_MS": "150"}
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--headless"],
        env=slow,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = state_dir / "steps" / "w" / "analyse" / "execution" / ".weft" / "weft.db"
    try:
        deadline = time.monotonic() + 30
        while not journal.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        coordinator.send_signal(signal.SIGTERM)
        _, err = coordinator.communicate(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 143
    assert "the steps left running resume with: weft batch resume" in err
    assert _step_row(state_dir, "w/analyse").state == "S_RUNNING"
    done = weft(env, "resume", str(path), "--headless")
    assert done.returncode == 0, done.stdout + done.stderr
    assert states(state_dir)["w/analyse"] == ("S_SUCCESS", 2)
