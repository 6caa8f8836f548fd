"""Batch overhead per step (issue 22): ``weft batch run`` against a shell loop of
``weft run`` processes, in the same run.

Each step is the 3-codon hank of ``examples/batch`` on the fake agent, on its
own data folder. The baseline is what a user would write without ``weft
batch``: ``for d in data/*; do weft run hank $d -e ...; done``, one
interpreter per execution. The batch runs the same executions with one
worker (the same parallelism as the loop, so the ratio is the per-step
overhead saved or added: store, audit rows, scheduling, in-process runs) and
with two workers (the machine's cores), in process (the default), with
``--isolate`` (a ``weft run`` process per step, like the loop), and on a
local Ray instance (``--engine ray``, skipped without Ray; its start-up,
about 12 s on the 2-core machine, is included).

``WEFT_BENCH_BATCH_STEPS`` sets the size (default 12; the issue's 1,000 is a
long run: ``WEFT_BENCH_BATCH_STEPS=1000 make bench``). Each benchmark records
``items`` (steps), so the summary compares time per step, and
``summary`` holds executions per minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HANK = ROOT / "examples" / "batch" / "hank"
STEPS = int(os.environ.get("WEFT_BENCH_BATCH_STEPS", "12"))


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


def _record(benchmark: Any, seconds: float) -> None:
    benchmark.extra_info["items"] = STEPS
    benchmark.extra_info["summary"] = f"{STEPS / seconds * 60:.0f} executions/minute"


@pytest.mark.benchmark(group="batch")
def test_shell_loop_of_weft_run_baseline(benchmark: Any, workspace: Any) -> None:
    tmp, folders, _ = workspace
    env = _env(tmp)

    def loop() -> None:
        out = _fresh(tmp, "loop")
        for folder in folders:
            subprocess.run(
                [sys.executable, "-m", "weft", "run", str(HANK), str(folder),
                 "--execution", str(out / folder.name), "--headless"],
                env=env, check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip

    benchmark.pedantic(loop, rounds=1, iterations=1)
    _record(benchmark, benchmark.stats.stats.median)


@pytest.mark.parametrize(
    ("workers", "mode"),
    [(1, "in-process"), (2, "in-process"), (1, "isolate"), (2, "isolate"), (2, "ray")],
)
@pytest.mark.benchmark(group="batch")
def test_weft_batch(benchmark: Any, workspace: Any, workers: int, mode: str) -> None:
    if mode == "ray":
        pytest.importorskip("ray")
    tmp, _, batch = workspace
    env = _env(tmp)

    def run() -> None:
        state = _fresh(tmp, f"state-{workers}-{mode}")
        argv = [sys.executable, "-m", "weft", "batch", "run", str(batch), "--headless",
                "--workers", str(workers), "--state-dir", str(state)]  # fmt: skip
        if mode == "isolate":
            argv.append("--isolate")
        if mode == "ray":
            argv += ["--engine", "ray"]
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)

    benchmark.pedantic(run, rounds=1, iterations=1)
    _record(benchmark, benchmark.stats.stats.median)
