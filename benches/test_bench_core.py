"""The compiled core against the pure-Python oracle, on the same data.

(a) one ``validate_transition`` call from Python; (b) applying a batch of
100k mixed transitions; (c) cost queries on states of 100, 10k and 100k
codon records. Run with ``make bench``; the ratios print at the end.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.oracle import OracleCore
from tests.oracle import validate_transition as oracle_validate

from benches.workload import RUN, as_array, mixed_stream, records_stream
from weft import core

BATCH = 100_000
META = {"claudeSessionId": "8f2c1d4e-session"}


@pytest.mark.benchmark(group="a: validate_transition")
def test_validate_transition_baseline_oracle(benchmark: Any) -> None:
    benchmark(oracle_validate, "initializing", "running", META)


@pytest.mark.benchmark(group="a: validate_transition")
def test_validate_transition_rust(benchmark: Any) -> None:
    benchmark(core.validate_transition, "initializing", "running", META)


@pytest.fixture(scope="module")
def batch() -> bytes:
    return as_array(mixed_stream(BATCH))


def _apply_rust(payload: bytes) -> int:
    result = core.Core().apply_batch(payload)
    return result.applied


def _apply_oracle(payload: bytes) -> int:
    return OracleCore().apply_batch(payload)


@pytest.mark.benchmark(group="b: apply 100k mixed transitions")
def test_apply_batch_baseline_oracle(benchmark: Any, batch: bytes) -> None:
    applied = benchmark.pedantic(_apply_oracle, args=(batch,), rounds=3, iterations=1)
    assert applied == _apply_rust(batch)


@pytest.mark.benchmark(group="b: apply 100k mixed transitions")
def test_apply_batch_rust(benchmark: Any, batch: bytes) -> None:
    applied = benchmark.pedantic(_apply_rust, args=(batch,), rounds=15, iterations=1)
    assert 0.9 * BATCH < applied < BATCH
    if benchmark.stats is None:  # --benchmark-disable: ran once, nothing measured
        return
    per_second = BATCH / benchmark.stats.stats.median
    benchmark.extra_info["transitions_per_second"] = per_second
    benchmark.extra_info["summary"] = f"{per_second / 1e6:.2f}M transitions/s"


SIZES = [100, 10_000, 100_000]


@pytest.fixture(scope="module")
def states() -> dict[int, tuple[core.Core, OracleCore]]:
    built: dict[int, tuple[core.Core, OracleCore]] = {}
    for size in SIZES:
        payload = records_stream(size)
        rust = core.Core()
        rust.apply_batch(payload)
        oracle = OracleCore()
        oracle.apply_batch(payload)
        assert rust.codon_record_count == size
        assert rust.total_cost() == oracle.total_cost()
        built[size] = (rust, oracle)
    return built


def _queries(c: Any) -> float:
    """Total, current-run and one codon's cost: what a progress view asks per event."""
    return c.total_cost() + c.current_run_cost() + (c.codon_cost(RUN, "codon-0") or 0.0)


@pytest.mark.parametrize("size", SIZES)
def test_cost_queries_baseline_oracle(benchmark: Any, states: Any, size: int) -> None:
    benchmark.group = f"c: cost queries, {size:>6} records"
    oracle = states[size][1]
    assert benchmark(_queries, oracle) == _queries(states[size][0])


@pytest.mark.parametrize("size", SIZES)
def test_cost_queries_rust(benchmark: Any, states: Any, size: int) -> None:
    benchmark.group = f"c: cost queries, {size:>6} records"
    benchmark(_queries, states[size][0])
    if benchmark.stats is None:
        return
    benchmark.extra_info["summary"] = f"{benchmark.stats.stats.median * 1e9:.0f} ns per 3 queries"
