"""``weft batch`` end to end: the example, status's audit trail, JUnit, recovery
commands, and a SIGKILLed coordinator resumed. Real processes, real SQLite."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from tests.batch.support import (
    EXAMPLE_FINAL_STATES,
    assert_audit_within_workers,
    assert_no_self_moves,
    final_states,
    write_batch,
)
from tests.runtime.hanks import subprocess_environment

from weft.batch.engine import process_start
from weft.batch.store import BatchStore
from weft.errors import StoreError

ROOT = Path(__file__).resolve().parents[2]


def weft(env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weft", "batch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def states(state_dir: Path) -> dict[str, Any]:
    with BatchStore.open(state_dir, writer=False) as store:
        stored = store.load()
    out: dict[str, Any] = {w.ws_id: w.state for w in stored.workstreams}
    out.update({s.key: (s.state, s.launches) for s in stored.steps})
    return out


def test_the_example_sweep_retries_abandons_and_status_shows_the_audit_trail(
    tmp_path: Path,
) -> None:
    example = tmp_path / "batch"
    shutil.copytree(
        ROOT / "examples" / "batch", example, ignore=shutil.ignore_patterns(".weft-batch")
    )
    env = subprocess_environment(tmp_path)
    junit = tmp_path / "junit.xml"
    done = weft(env, "run", str(example / "sweep.toml"), "--workers", "2", "--headless",
                "--junit", str(junit))  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    got = states(example / ".weft-batch" / "sweep")
    for name in ("alpha", "beta", "gamma"):
        assert got[f"sweep-{name}"] == "S_SUCCESS"
        assert got[f"sweep-{name}/analyse"] == ("S_SUCCESS", 1)
    assert got["flaky"] == "S_ABANDONED"
    assert got["flaky/fetch"] == ("S_FAILED", 3)
    assert got["flaky/publish"] == ("S_PENDING", 0)

    status = weft(env, "status", str(example / "sweep.toml"))
    assert status.returncode == 0, status.stderr
    trail = [line.split() for line in status.stdout.splitlines() if line.startswith("  20")]
    flaky = [(t[1], t[2], t[4]) for t in trail if t[1].startswith("flaky")]
    assert flaky == [
        ("flaky", "S_PENDING", "S_RUNNING"),
        ("flaky/fetch", "S_PENDING", "S_RUNNING"),
        ("flaky/fetch", "S_RUNNING", "S_FAILED"),
        ("flaky/fetch", "S_FAILED", "S_RETRYING"),
        ("flaky/fetch", "S_RETRYING", "S_RUNNING"),
        ("flaky/fetch", "S_RUNNING", "S_FAILED"),
        ("flaky/fetch", "S_FAILED", "S_RETRYING"),
        ("flaky/fetch", "S_RETRYING", "S_RUNNING"),
        ("flaky/fetch", "S_RUNNING", "S_FAILED"),
        ("flaky", "S_RUNNING", "S_FAILED"),
        ("flaky", "S_FAILED", "S_ABANDONED"),
    ]
    assert "breaker upstream: OPEN (3 consecutive failures)" in status.stdout
    abandoned = next(line for line in status.stdout.splitlines() if "-> S_ABANDONED" in line)
    assert abandoned.endswith(
        "workstream retries spent (0 of 0); step fetch failed after 2 of 2 step retries "
        "(3 launches)"
    )
    # One trail in the order written (the audit ids), never by time: the breaker
    # opens at fetch's third failure, before the workstream fails, even when the
    # two rows share a millisecond (under load they do, and a sort by time put
    # the workstream's failure first).
    moves = [(t[1], t[2]) for t in trail if t[1].startswith("flaky") or t[1] == "breaker"]
    opened = moves.index(("breaker", "upstream"))
    assert moves[opened - 1] == ("flaky/fetch", "S_RUNNING")
    assert moves[opened + 1] == ("flaky", "S_RUNNING")
    with BatchStore.open(example / ".weft-batch" / "sweep", writer=False) as store:
        assert_audit_within_workers(store.transitions(), 2)
        assert_no_self_moves(store)

    report = json.loads(weft(env, "status", str(example / "sweep.toml"), "--json").stdout)
    written = sorted(
        [(t["id"], t["at"]) for t in report["transitions"]]
        + [(t["id"], t["at"]) for t in report["breaker_transitions"]]
        + [(n["id"], n["at"]) for n in report["notes"]]
    )
    assert [t[0] for t in trail] == [at for _, at in written], "the trail is in id order"
    assert len({i for i, _ in written}) == len(written), "one id sequence over both tables"
    assert final_states(report) == EXAMPLE_FINAL_STATES, "the Ray test checks the same table"
    assert report["succeeded"] is False
    assert report["total_cost_usd"] > 0
    workstream_costs = sum(w["cost_usd"] for w in report["workstreams"])
    assert report["total_cost_usd"] == pytest.approx(workstream_costs, abs=1e-5)

    suites = ET.parse(junit).getroot()
    assert suites.get("tests") == "11"
    assert suites.get("failures") == "1"
    fetch = suites.find("testsuite[@name='flaky']/testcase[@name='fetch']")
    assert fetch is not None
    failure = fetch.find("failure")
    assert failure is not None
    assert "upstream: 503 Service Unavailable" in (failure.text or "")
    skipped = suites.find("testsuite[@name='flaky']/testcase[@name='publish']/skipped")
    assert skipped is not None
    assert skipped.get("message") == "blocked by fetch"

    reset = weft(env, "reset-breaker", str(example / "sweep.toml"), "upstream")
    assert reset.stdout.strip() == "breaker upstream: OPEN -> CLOSED"


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _step_row(state_dir: Path, key: str) -> Any:
    try:
        with BatchStore.open(state_dir, writer=False) as store:
            return next((s for s in store.load().steps if s.key == key), None)
    except StoreError:  # not created yet
        return None


def test_a_sigkilled_coordinator_resumes_without_running_anything_twice(tmp_path: Path) -> None:
    # "adopt/a" outlives the coordinator and is adopted; "lost/a" dies with it
    # and is launched again (its second launch succeeds).
    adopt = 'sleep 1.5; echo ran >> "$WEFT_BATCH_STEP_DIR/runs"'
    lost = (
        'echo ran >> "$WEFT_BATCH_STEP_DIR/runs"; '
        'test -e "$WEFT_BATCH_STEP_DIR/second" && exit 0; '
        'touch "$WEFT_BATCH_STEP_DIR/second"; sleep 60'
    )
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "adopt",
                    "steps": [
                        {"id": "a", "command": ["sh", "-c", adopt]},
                        {"id": "b", "command": ["true"], "depends_on": ["a"]},
                    ],
                },
                {"id": "lost", "steps": [{"id": "a", "command": ["sh", "-c", lost]}]},
                {"id": "done", "steps": [{"id": "a", "command": ["true"]}]},
            ]
        },
    )
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--workers", "3", "--headless"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def both_running() -> bool:
            rows = [_step_row(state_dir, k) for k in ("adopt/a", "lost/a", "done/a")]
            return all(r is not None for r in rows) and (
                rows[0].pid is not None and rows[1].pid is not None and rows[2].state == "S_SUCCESS"
            )

        _wait_for(both_running)
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    adopted, lost_row = _step_row(state_dir, "adopt/a"), _step_row(state_dir, "lost/a")
    os.killpg(lost_row.pid, signal.SIGKILL)  # the lost step dies with its coordinator
    assert adopted.state == "S_RUNNING"
    os.kill(adopted.pid, 0)  # still running, without its coordinator

    done = weft(env, "resume", str(path), "--workers", "3", "--headless", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    got = states(state_dir)
    assert got["adopt/a"] == ("S_SUCCESS", 1), "adopted, not launched again"
    assert got["adopt/b"] == ("S_SUCCESS", 1)
    assert got["lost/a"] == ("S_SUCCESS", 2)
    assert got["done/a"] == ("S_SUCCESS", 1), "a finished step never runs again"
    step_dir = state_dir / "steps"
    assert (step_dir / "adopt" / "a" / "runs").read_text() == "ran\n"
    assert (step_dir / "lost" / "a" / "runs").read_text() == "ran\nran\n"
    with BatchStore.open(state_dir, writer=False) as store:
        notes = [n for n in store.notes() if n["name"] == "lost/a"]
        assert_no_self_moves(store)
    assert any("process lost" in n["metadata"].get("reason", "") for n in notes)


def test_abandon_reaches_a_running_coordinator_which_stops_the_step(tmp_path: Path) -> None:
    path = write_batch(
        tmp_path,
        {"workstreams": [{"id": "w", "steps": [{"id": "s", "command": ["sleep", "60"]}]}]},
    )
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: (r := _step_row(state_dir, "w/s")) is not None and r.pid is not None)
        sent = weft(env, "abandon", str(path), "w")
        assert sent.stdout.strip() == "workstream w: abandon requested (in S_RUNNING)"
        out, _ = coordinator.communicate(timeout=20)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 1
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[-1]["type"] == "summary"
    assert lines[-1]["workstreams"][0]["state"] == "S_ABANDONED"
    overhead = lines[-1]["coordinator"]
    assert (overhead["workers"], overhead["launches"]) == (os.cpu_count() or 1, 1)
    assert overhead["busy_ms"] > 0
    moves = [
        (x.get("workstream") or x.get("step"), x["to"])
        for x in lines[:-1]
        if x["type"] == "transition"
    ]
    assert all(x["type"] in ("transition", "note") for x in lines[:-1])
    notes = [x for x in lines[:-1] if x["type"] == "note"]
    assert [(n["workstream"], n["state"]) for n in notes] == [("w", "S_RUNNING")], "the request"
    assert ("w", "S_ABANDONED") in moves
    assert ("w/s", "S_FAILED") in moves


def _failed_batch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A finished batch: ``w/a`` failed for good, ``w/b`` (behind it) never ran."""
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "w",
                    "steps": [
                        {"id": "a", "command": ["false"]},
                        {"id": "b", "command": ["true"], "depends_on": ["a"]},
                    ],
                }
            ]
        },
    )
    env = subprocess_environment(tmp_path)
    assert weft(env, "run", str(path), "--headless").returncode == 1
    return path, env


def test_recovery_commands_naming_nothing_exit_2_on_stderr_and_queue_nothing(
    tmp_path: Path,
) -> None:
    path, env = _failed_batch(tmp_path)
    for args, why in (
        (("retry", "w/nosuch"), "no step 'w/nosuch'; known: w/a, w/b"),
        (("skip", "nosuch/a"), "no step 'nosuch/a'"),
        (("retry", "a"), "retry takes a step as WS/STEP, not 'a'"),
        (("abandon", "nosuch"), "no workstream 'nosuch'; known: w"),
        (("reset-breaker", "nosuch"), "no breaker for tool 'nosuch'"),
    ):
        done = weft(env, args[0], str(path), args[1])
        assert (done.returncode, done.stdout) == (2, ""), (args, done)
        assert done.stderr.startswith("weft: error: "), (args, done)
        assert why in done.stderr, (args, done)
    with BatchStore.open(tmp_path / ".weft-batch" / "batch", writer=False) as store:
        assert store.pending_commands() == []
        assert store.command_result(1) is None  # nothing was ever queued


def test_a_refused_recovery_command_exits_1_with_its_reason_on_stderr(tmp_path: Path) -> None:
    path, env = _failed_batch(tmp_path)
    for args, why in (
        # the workstream was abandoned (its retries spent): nothing in it moves
        (("retry", "w/a"), "step w/a belongs to workstream w, which is S_ABANDONED (terminal)"),
        (("skip", "w/a"), "step w/a belongs to workstream w, which is S_ABANDONED (terminal)"),
        (("retry", "w/b"), "step w/b is S_PENDING; only a step in S_FAILED is retried"),
        (("abandon", "w"), "workstream w is already S_ABANDONED (terminal)"),
    ):
        done = weft(env, args[0], str(path), args[1])
        assert (done.returncode, done.stdout) == (1, ""), (args, done)
        assert done.stderr.startswith(f"weft: refused: {why}"), (args, done)
    applied = weft(env, "reset-breaker", str(path), "false")  # a step's tool: its command
    assert (applied.returncode, applied.stderr) == (0, ""), applied
    assert applied.stdout.startswith("breaker false: ")


def test_skip_reaches_a_running_coordinator_and_the_dependents_run(tmp_path: Path) -> None:
    # "a" fails and waits a minute to retry; skipped, "b" behind it runs at once.
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "w",
                    "steps": [
                        {
                            "id": "a",
                            "command": ["false"],
                            "max_retries": 3,
                            "retry_backoff": {"base_delay_ms": 60000, "max_delay_ms": 60000},
                        },
                        {"id": "b", "command": ["true"], "depends_on": ["a"]},
                    ],
                }
            ]
        },
    )
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: (r := _step_row(state_dir, "w/a")) is not None and r.launches == 1
                  and r.state == "S_RETRYING")  # fmt: skip
        sent = weft(env, "skip", str(path), "w/a")
        assert (sent.returncode, sent.stderr) == (0, ""), sent
        assert sent.stdout.strip() == (
            "step w/a: skipped (S_RETRYING -> S_SUCCESS; its dependents may run)"
        )
        again = weft(env, "skip", str(path), "w/a")
        assert again.returncode == 1
        assert again.stderr.startswith("weft: refused: step w/a is S_SUCCESS")
        out, _ = coordinator.communicate(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0
    summary = json.loads(out.splitlines()[-1])
    steps = {s["id"]: s for s in summary["workstreams"][0]["steps"]}
    assert steps["a"]["skipped"] is True
    assert steps["a"]["launches"] == 1
    assert steps["b"]["state"] == "S_SUCCESS"
    assert "skipped" not in steps["b"]
    status = weft(env, "status", str(path))
    assert status.returncode == 0
    line = next(x for x in status.stdout.splitlines() if "w/a" in x and "skipped" in x)
    assert "S_RETRYING -> S_SUCCESS  skipped by the user" in line
    a_line = next(x for x in status.stdout.splitlines() if x.strip().startswith("a "))
    assert "skipped" in a_line


@pytest.mark.parametrize("ends", ["while adopted", "before the resume"])
def test_an_adopted_step_is_timed_from_its_real_start(tmp_path: Path, ends: str) -> None:
    # A 3 s step whose coordinator is SIGKILLed after about 0.5 s: adopted by the
    # resumed coordinator (still running, or finished with its exit file), its
    # duration is the step's own, in the summary and in JUnit, not the time since adoption.
    path = write_batch(
        tmp_path, {"workstreams": [{"id": "w", "steps": [{"id": "s", "command": ["sleep", "3"]}]}]}
    )
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--headless"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(lambda: (r := _step_row(state_dir, "w/s")) is not None and r.pid is not None)
        time.sleep(0.5)
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    if ends == "before the resume":
        time.sleep(3.5)
        assert (state_dir / "steps" / "w" / "s" / "exit").read_text() == "0"
    junit = tmp_path / "junit.xml"
    done = weft(env, "resume", str(path), "--headless", "--junit", str(junit))
    assert done.returncode == 0, done.stdout + done.stderr
    row = _step_row(state_dir, "w/s")
    assert (row.state, row.launches) == ("S_SUCCESS", 1)
    assert 2900 <= row.duration_ms < 3900, row.duration_ms
    case = ET.parse(junit).getroot().find(".//testcase")
    assert case is not None
    assert 2.9 <= float(case.get("time", "0")) < 3.9


def test_a_step_past_its_timeout_is_stopped_fails_and_is_retried(tmp_path: Path) -> None:
    # Each launch writes its pid and sleeps a minute; the timeout stops it after 1 s.
    body = 'echo $$ >> "$WEFT_BATCH_STEP_DIR/pids"; exec sleep 60'
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "w",
                    "steps": [
                        {
                            "id": "slow",
                            "command": ["sh", "-c", body],
                            "timeout_seconds": 1,
                            "max_retries": 1,
                            "retry_backoff": {"base_delay_ms": 10},
                        }
                    ],
                }
            ]
        },
    )
    env = subprocess_environment(tmp_path)
    started = time.monotonic()
    done = weft(env, "run", str(path), "--json", timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert took < 20, took
    summary = json.loads(done.stdout.splitlines()[-1])
    step = summary["workstreams"][0]["steps"][0]
    assert (step["state"], step["launches"]) == ("S_FAILED", 2)
    assert step["error"].startswith("timed out after 1s (stopped)")
    assert 900 <= step["duration_ms"] < 5000, step["duration_ms"]
    state_dir = tmp_path / ".weft-batch" / "batch"
    with BatchStore.open(state_dir, writer=False) as store:
        reasons = [t["metadata"].get("reason") for t in store.transitions() if t["step_id"]]
        stops = [n["metadata"].get("reason") for n in store.notes() if n["subject"] == "step"]
    assert stops.count("timed out after 1s: stopping") == 2
    assert reasons.count("timed out after 1s") == 2
    pids = (state_dir / "steps" / "w" / "slow" / "pids").read_text().split()
    assert len(pids) == 2
    for pid in pids:  # no launch outlives its timeout
        assert process_start(int(pid)) is None


def test_status_flags_a_step_past_its_timeout_or_thrice_the_median(tmp_path: Path) -> None:
    # With its coordinator SIGKILLed, nothing stops the steps: status says they
    # run too long ("timed" past its 4 s timeout, "long" past 3x the 1 s of "quick").
    path = write_batch(
        tmp_path,
        {
            "workstreams": [
                {
                    "id": "a",
                    "steps": [
                        {"id": "quick", "command": ["sleep", "1"]},
                        {"id": "long", "command": ["sleep", "30"], "depends_on": ["quick"]},
                    ],
                },
                {
                    "id": "b",
                    "steps": [{"id": "timed", "command": ["sleep", "30"], "timeout_seconds": 4}],
                },
            ]
        },
    )
    state_dir = tmp_path / ".weft-batch" / "batch"
    env = subprocess_environment(tmp_path)
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "weft", "batch", "run", str(path), "--workers", "2", "--headless"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rows: list[Any] = []
    try:

        def both_running() -> bool:
            rows[:] = [_step_row(state_dir, k) for k in ("a/long", "b/timed")]
            return all(r is not None and r.pid is not None for r in rows)

        _wait_for(both_running)
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
        early = weft(env, "status", str(path), "--json")
        time.sleep(3.5)
        late = weft(env, "status", str(path))
        late_json = weft(env, "status", str(path), "--json")
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
        for row in rows:
            if row is not None and row.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(row.pid, signal.SIGKILL)

    def steps(out: str) -> dict[str, Any]:
        report = json.loads(out)
        return {f"{w['id']}/{s['id']}": s for w in report["workstreams"] for s in w["steps"]}

    assert all("overdue" not in s for s in steps(early.stdout).values()), early.stdout
    flagged = steps(late_json.stdout)
    assert flagged["b/timed"]["overdue"].endswith("past its timeout of 4s")
    assert (
        "over 3x the median (1.0s) of its workstream's finished steps"
        in (flagged["a/long"]["overdue"])
    )
    assert "overdue" not in flagged["a/quick"]
    text = late.stdout.splitlines()
    assert any("timed" in line and "OVERDUE: running" in line for line in text), late.stdout
    assert any("long" in line and "OVERDUE: running" in line for line in text), late.stdout
