"""The local engine's guarantees: exit codes through the file, adoption by pid
and start time, a lost process relaunched, costs read from the execution."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from weft.batch.engine import (
    LaunchSpec,
    LocalEngine,
    execution_cost,
    group_alive,
    process_start,
)


def spec(tmp_path: Path, *argv: str) -> LaunchSpec:
    return LaunchSpec(
        key="w/s",
        argv=argv,
        cwd=tmp_path,
        env=dict(os.environ),
        step_dir=tmp_path / "step",
        execution_dir=None,
    )


async def test_a_launch_reports_its_exit_code_and_writes_it_to_the_exit_file(
    tmp_path: Path,
) -> None:
    engine = LocalEngine()
    launch = spec(tmp_path, "sh", "-c", "echo boom; exit 7")
    pid, start = await engine.start(launch)
    assert pid > 0
    assert start is not None
    key, outcome = await asyncio.wait_for(engine.completions.get(), 20)
    assert (key, outcome.exit_code) == ("w/s", 7)
    assert launch.exit_path.read_text() == "7"
    assert outcome.error is not None
    assert "boom" in outcome.error
    assert engine.active == 0


async def test_adoption_waits_for_a_live_process_and_refuses_a_gone_one(tmp_path: Path) -> None:
    launch = spec(tmp_path, "true")
    launch.step_dir.mkdir(parents=True)
    # A process that is not ours (as after a coordinator crash) that will end
    # after writing an exit code.
    other = subprocess.Popen(
        ["sh", "-c", f'sleep 0.5; printf 0 > "{launch.exit_path}"'], start_new_session=True
    )
    engine = LocalEngine()
    assert engine.adopt(launch, other.pid, process_start(other.pid))
    key, outcome = await asyncio.wait_for(engine.completions.get(), 20)
    other.wait()
    assert (key, outcome.exit_code) == ("w/s", 0)

    launch.exit_path.unlink()
    assert not engine.adopt(launch, other.pid, process_start(other.pid) or "gone"), (
        "a dead process without an exit code must be launched again"
    )
    # A reused pid (same number, another start time) is not the step's process.
    assert not engine.adopt(launch, os.getpid(), "0")


def test_execution_cost_sums_every_run_and_codon(tmp_path: Path) -> None:
    weft = tmp_path / ".weft"
    weft.mkdir()
    runs = [
        {
            "codons": [
                {"status": "completed", "finalCost": 0.5},
                {"status": "failed", "partialCost": 0.25},
            ]
        },
        {"codons": [{"status": "running", "currentCost": 0.125}, {"status": "pending"}]},
    ]
    (weft / "state.json").write_text(json.dumps({"runs": runs}))
    assert execution_cost(tmp_path) == 0.875
    assert execution_cost(tmp_path / "missing") == 0.0
    assert execution_cost(None) == 0.0


async def test_a_cancelled_launch_that_ignores_sigterm_is_killed_after_the_grace(
    tmp_path: Path,
) -> None:
    engine = LocalEngine(stop_grace_s=0.5)
    launch = spec(tmp_path, "sh", "-c", 'trap "" TERM; touch "$0.ready"; sleep 30', "x")
    pid, _ = await engine.start(launch)
    ready = tmp_path / "x.ready"
    for _ in range(200):
        if ready.exists():
            break
        await asyncio.sleep(0.02)
    started = time.monotonic()
    engine.cancel("w/s")
    key, outcome = await asyncio.wait_for(engine.completions.get(), 10)
    assert (key, outcome.exit_code) == ("w/s", None), "killed: no exit code"
    assert 0.4 <= time.monotonic() - started < 5
    assert not group_alive(pid), "its whole process group is gone"
