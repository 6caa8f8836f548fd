"""Batch overhead per step (issue 22): ``weft batch run`` against a shell loop of
``weft run`` processes, the local engine and Ray side by side, in the same run.

Each step is the 3-codon hank of ``examples/batch`` on the fake agent, on its
own data folder. The baseline is what a user would write without ``weft
batch``: ``for d in data/*; do weft run hank $d -e ...; done``, one
interpreter per execution. The batch runs the same executions with one
worker (the same parallelism as the loop) and with two (the machine's
cores), in process (the default), with ``--isolate`` (a ``weft run`` process
per step, like the loop), and on a local Ray instance (``--engine ray``; its
start-up, about 12 s on the 2-core machine, is included in the wall time).
Ray is required: without it the Ray benchmark fails (``pip install
'weft[ray]'``), unless ``WEFT_BENCH_BATCH_RAY=0``.

Every benchmark reports, in its ``summary`` (printed by ``benches/conftest.py``
against the loop):

* **executions/minute**, from the wall time (start-up included);
* **outside the runs per step**: ``(workers * wall - sum of the runs' own
  times) / steps``, the slot time a step costs beyond its hank's run (the
  run's ``startTime``..``endTime`` in its execution's ``state.json``):
  interpreter start and imports for the loop, and for a batch everything the
  batch adds or saves; the same measure for every mode;
* for a batch, the **coordinator overhead per step**, measured directly (the
  ``coordinator`` figures of ``weft batch run --json``'s summary): its own work
  per launch (store commits with their audit rows, scheduling, the inbox: wall
  time inside the coordinator) and the **slot gap**, the time from a step's
  end to the next launch in that worker slot, replayed from the audit trail
  (median; every step of this batch is ready at once, so a gap is the
  coordinator's latency, not a dependency's wait).

``WEFT_BENCH_BATCH_STEPS`` sets the size (default 12; the issue's 1,000:
``WEFT_BENCH_BATCH_STEPS=1000 python -m pytest benches/test_bench_batch.py
--benchmark-only -p no:randomly``, see ``docs/batch.md``). Each benchmark
records ``items`` (steps), so the summary compares time per step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HANK = ROOT / "examples" / "batch" / "hank"
STEPS = int(os.environ.get("WEFT_BENCH_BATCH_STEPS", "12"))
WITH_RAY = os.environ.get("WEFT_BENCH_BATCH_RAY", "1") != "0"
pytestmark = pytest.mark.timeout(max(300, 3 * STEPS))
"""The suite's 300 s per-test limit would end a 1,000-step loop (about 7 minutes on
a quiet 2-core machine, twice that under load): each benchmark gets 3 s a step."""
LOOP: dict[str, float] = {}
"""The baseline's figures, quoted beside each batch's (the summary prints no
line for a baseline)."""


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        FAKE_AGENT_LINE_DELAY_MS="0",
        CLAUDE_CONFIG_DIR=str(tmp / "claude-config"),
        WEFT_RUNTIME_EXECUTION_BASE_DIR=str(tmp / "managed"),
    )
    return env


def _data(tmp: Path) -> list[Path]:
    folders = []
    for i in range(STEPS):
        folder = tmp / "data" / f"d{i:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "input.txt").write_text(f"data set {i}\n")
        folders.append(folder)
    return folders


def _batch_file(tmp: Path, folders: list[Path]) -> Path:
    doc = {
        "name": "bench",
        "allow_absolute_paths": True,  # the example's hank, outside tmp
        "max_steps": max(len(folders), 1),  # WEFT_BENCH_BATCH_STEPS may pass the default 1,000
        "workstreams": [
            {
                "id": "bench-{d}",
                "matrix": {"d": [f.name for f in folders]},
                "steps": [{"id": "run", "hank": str(HANK), "data": str(tmp / "data") + "/{d}"}],
            }
        ],
    }
    path = tmp / "bench.json"
    path.write_text(json.dumps(doc))
    return path


def _fresh(tmp: Path, name: str) -> Path:
    target = tmp / name
    shutil.rmtree(target, ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], Path]:
    tmp = tmp_path_factory.mktemp("bench-batch")
    folders = _data(tmp)
    return tmp, folders, _batch_file(tmp, folders)


def _ms(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def _run_time_ms(executions: list[Path]) -> float:
    """The runs' own time: every run's ``endTime - startTime`` in each execution."""
    total = 0.0
    for execution in executions:
        state = json.loads((execution / ".weft" / "state.json").read_bytes())
        for run in state["runs"]:
            total += _ms(run["endTime"]) - _ms(run["startTime"])
    return total


def _record(
    benchmark: Any,
    wall_s: float,
    workers: int,
    executions: list[Path],
    coordinator: dict[str, Any] | None = None,
) -> None:
    assert len(executions) == STEPS, f"{len(executions)} executions for {STEPS} steps"
    outside_ms = (workers * wall_s * 1000 - _run_time_ms(executions)) / STEPS
    info = benchmark.extra_info
    info["items"] = STEPS
    info["executions_per_minute"] = round(STEPS / wall_s * 60, 1)
    info["outside_runs_ms_per_step"] = round(outside_ms, 1)
    text = f"{STEPS / wall_s * 60:.0f} executions/minute; {outside_ms:.0f} ms/step outside runs"
    if coordinator is None:
        LOOP.update(per_minute=STEPS / wall_s * 60, outside_ms=outside_ms)
    elif LOOP:
        text += f" (loop: {LOOP['per_minute']:.0f}/minute, {LOOP['outside_ms']:.0f} ms)"
    if coordinator is not None:
        info["coordinator"] = coordinator
        text += (
            f"; coordinator {coordinator['busy_ms_per_launch']:.1f} ms busy/step, "
            f"slot gap {coordinator['slot_gap_ms_median']} ms (median)"
        )
    info["summary"] = text


@pytest.mark.benchmark(group="batch")
def test_shell_loop_of_weft_run_baseline(benchmark: Any, workspace: Any) -> None:
    tmp, folders, _ = workspace
    env = _env(tmp)
    out = tmp / "loop"

    def loop() -> None:
        _fresh(tmp, "loop")
        for folder in folders:
            subprocess.run(
                [sys.executable, "-m", "weft", "run", str(HANK), str(folder),
                 "--execution", str(out / folder.name), "--headless"],
                env=env, check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip

    started = time.perf_counter()
    benchmark.pedantic(loop, rounds=1, iterations=1)
    wall = time.perf_counter() - started
    _record(benchmark, wall, 1, sorted(out.iterdir()))


@pytest.mark.parametrize(
    ("workers", "mode"),
    [(1, "in-process"), (2, "in-process"), (1, "isolate"), (2, "isolate"), (2, "ray")],
)
@pytest.mark.benchmark(group="batch")
def test_weft_batch(benchmark: Any, workspace: Any, workers: int, mode: str) -> None:
    if mode == "ray":
        if not WITH_RAY:
            pytest.skip("WEFT_BENCH_BATCH_RAY=0")
        try:
            import ray  # noqa: F401  # only to fail early, with the fix
        except ImportError:
            pytest.fail("the Ray engine is measured beside the local one: pip install 'weft[ray]'")
    tmp, _, batch = workspace
    env = _env(tmp)
    state = tmp / f"state-{workers}-{mode}"
    summary: dict[str, Any] = {}

    def run() -> None:
        _fresh(tmp, state.name)
        argv = [sys.executable, "-m", "weft", "batch", "run", str(batch), "--json",
                "--workers", str(workers), "--state-dir", str(state)]  # fmt: skip
        if mode == "isolate":
            argv.append("--isolate")
        if mode == "ray":
            argv += ["--engine", "ray"]
        done = subprocess.run(argv, env=env, check=True, stdout=subprocess.PIPE, text=True)
        summary.update(json.loads(done.stdout.splitlines()[-1]))

    started = time.perf_counter()
    benchmark.pedantic(run, rounds=1, iterations=1)
    wall = time.perf_counter() - started
    assert summary["succeeded"], "every step succeeds"
    executions = sorted((state / "steps").glob("*/run/execution"))
    _record(benchmark, wall, workers, executions, summary["coordinator"])
