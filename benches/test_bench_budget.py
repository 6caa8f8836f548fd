"""Budgets cost nothing measurable per codon (issue 16): the runtime-overhead
benchmark with every budget on against the same run with none, in one run.

"On" means a run ceiling in dollars and time, a dollar, time and token cap on
every codon: the watchdog is fed every usage event, checks every limit on each
one, and ticks for the time limits while each codon runs. "Off" (the baseline)
is the same hank without a budget: only the accounting for ``budget.summary``.
Both run in every round, in alternating order, and the figure is the median of
the rounds' on/off ratios (printed with ``-s``, and kept in the JSON as
``on_off_ratio``); the target is within 5%.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvloop

from benches.test_bench_runtime import GOLDEN, _ReplayHarness
from weft.config import load_hank
from weft.runtime.execution.prepare import prepare_execution
from weft.runtime.run.runtime import Runtime, RuntimeOptions

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


@pytest.mark.benchmark(group="budget-overhead")
def test_budget_overhead_paired(benchmark: Any, tmp_path: Path) -> None:
    """Each round runs the hank with budgets off and on, in alternating order
    (so load drifting during the run falls on both alike); the figure is the
    median of the rounds' on/off ratios."""
    runs = iter(range(1000))
    ratios: list[float] = []

    def pair() -> None:
        n = next(runs)
        took: dict[bool, float] = {}
        for budgets in (False, True) if n % 2 == 0 else (True, False):
            root = tmp_path / f"r{n}-{budgets}"
            root.mkdir()
            took[budgets] = _run(root, budgets)
        ratios.append(took[True] / took[False])

    benchmark.pedantic(pair, rounds=9, iterations=1)
    benchmark.extra_info["items"] = 2 * CODONS
    ratio = statistics.median(ratios)
    benchmark.extra_info["on_off_ratio"] = ratio
    benchmark.extra_info["summary"] = (
        f"budgets on / off = {ratio:.3f} (median of {len(ratios)} paired rounds; "
        f"target <= 1.05; every ratio: {', '.join(f'{r:.2f}' for r in sorted(ratios))})"
    )
