"""Budgets cost nothing measurable per codon (issue 16): the runtime-overhead
benchmark with every budget on against the same run with none, in one run.

"On" means a run ceiling in dollars and time, a dollar, time and token cap on
every codon: the watchdog is fed every usage event, checks every limit on each
one, and ticks for the time limits while each codon runs. "Off" (the baseline)
is the same hank without a budget: only the accounting for ``budget.summary``.
The summary line prints the ratio; the target is within 5%.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvloop

from benches.test_bench_runtime import GOLDEN, _ReplayHarness
from weft.config import load_hank
from weft.runtime.execution import prepare_execution
from weft.runtime.runtime import Runtime, RuntimeOptions

CODONS = 200
_CAPS = {
    "maxDollars": 1000.0,
    "maxTimeSeconds": 3600,
    "maxOutputTokens": 10_000_000,
    "maxContextTokens": 10_000_000,
}


def _hank(tmp: Path, budgets: bool) -> Path:
    codons = [
        {
            "id": f"c{i}",
            "name": f"codon {i}",
            "model": "fake/sonnet",
            "continuationMode": "fresh",
            "promptText": f"step {i}",
            "checkpointedFiles": ["src/**", "notes.md"],
            **({"budget": _CAPS} if budgets else {}),
        }
        for i in range(CODONS)
    ]
    doc: dict[str, Any] = {"hank": codons}
    if budgets:
        doc["overrides"] = {"budget": {"maxDollars": 10_000.0, "maxTimeSeconds": 36_000}}
    path = tmp / "hank.json"
    path.write_bytes(msgspec.json.encode(doc))
    return path


def _run(tmp: Path, budgets: bool) -> float:
    lines = [line for line in GOLDEN.read_bytes().splitlines() if line.strip()]
    hank_path = _hank(tmp, budgets)
    loaded = load_hank(hank_path)
    prepared = prepare_execution(
        hank_path, None, interactive=False, base_dir=tmp / "managed", execution_dir=tmp / "exec"
    )
    options = RuntimeOptions(
        max_dollars=10_000.0 if budgets else None, max_seconds=36_000 if budgets else None
    )
    runtime = Runtime(prepared, loaded, options)
    harness = _ReplayHarness(lines)
    runtime._harness = lambda model: (harness, "sonnet")  # type: ignore[method-assign]
    started = time.perf_counter()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        outcome = runner.run(runtime.run())
    took = time.perf_counter() - started
    assert outcome.status == "completed", outcome
    assert len(outcome.codons) == CODONS
    return took


def _bench(benchmark: Any, tmp_path: Path, budgets: bool) -> None:
    runs = iter(range(1000))

    def one() -> None:
        root = tmp_path / f"r{next(runs)}"
        root.mkdir()
        _run(root, budgets)

    benchmark.pedantic(one, rounds=5, iterations=1)
    benchmark.extra_info["items"] = CODONS


@pytest.mark.benchmark(group="budget-overhead")
def test_runtime_overhead_budgets_on(benchmark: Any, tmp_path: Path) -> None:
    _bench(benchmark, tmp_path, budgets=True)
    benchmark.extra_info["summary"] = "every budget on; 1.0x = no cost (target: within 5%)"


@pytest.mark.benchmark(group="budget-overhead")
def test_baseline_runtime_overhead_budgets_off(benchmark: Any, tmp_path: Path) -> None:
    _bench(benchmark, tmp_path, budgets=False)
