"""Forking is cheap (issue 36): a 1,000-codon execution forked at codon 900.

The execution is made with the scale benchmark's in-process replay agent (the
real runtime, store, checkpoints; one file changed per codon). The fork
(:func:`weft.fork.clone.make_fork`: journal backup, shared checkpoint objects,
work tree copy, rollback to the codon before) is timed against ``cp -r`` of
the same execution, its baseline, in the same run and the same rounds.

Asserted: the fork takes under a second, and it writes fewer bytes than the
copy (its checkpoint objects are the source's, read through git alternates).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop

from benches import test_bench_scale as scale
from weft.fork.clone import make_fork

CODONS = 1000
AT = 900
TARGET_SECONDS = 1.0
ROUNDS = 5


def _bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                total += os.stat(path).st_size
    return total


@pytest.mark.benchmark(group="fork")
@pytest.mark.timeout(900)
def test_fork_of_a_1000_codon_execution_at_codon_900(
    benchmark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scale, "CODONS", CODONS)
    _, db = scale._run(tmp_path)
    source = db.parent.parent
    state = __import__("json").loads((source / ".weft" / "state.json").read_text())
    ids = [c["codonId"] for run in state["runs"] for c in run["codons"]]
    at = ids[AT - 1]
    forks, copies = [], []
    for n in range(ROUNDS):
        copy = tmp_path / f"copy-{n}"
        started = time.perf_counter()
        subprocess.run(["cp", "-r", str(source), str(copy)], check=True)
        copies.append(time.perf_counter() - started)
        started = time.perf_counter()
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            fork = runner.run(make_fork(source, at, tmp_path / f"fork-{n}"))
        forks.append(time.perf_counter() - started)
    fork_s, copy_s = statistics.median(forks), statistics.median(copies)
    written, copied = _bytes(fork.path), _bytes(tmp_path / "copy-0")
    benchmark.extra_info.update(
        fork_s=round(fork_s, 3),
        cp_r_s=round(copy_s, 3),
        ratio=round(fork_s / copy_s, 2),
        fork_bytes=written,
        cp_r_bytes=copied,
    )
    print(
        f"\nfork of {CODONS} codons at {AT}: {fork_s * 1000:.0f} ms (median of {ROUNDS}); "
        f"cp -r {copy_s * 1000:.0f} ms; ratio {fork_s / copy_s:.2f}x; "
        f"{written / 1e6:.1f} MB written against {copied / 1e6:.1f} MB"
    )
    benchmark.pedantic(lambda: None, rounds=1)
    shutil.rmtree(tmp_path / "copy-0", ignore_errors=True)
    assert fork_s < TARGET_SECONDS, f"fork took {fork_s:.2f} s (target {TARGET_SECONDS} s)"
    assert written < copied
