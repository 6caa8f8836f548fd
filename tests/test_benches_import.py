"""The benchmark suites still import: they run only with `make bench`, so a
renamed module would otherwise break them unnoticed until someone measures."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHES = sorted(
    p.stem for p in (Path(__file__).resolve().parents[1] / "benches").glob("test_bench_*.py")
)


def test_there_are_benchmark_suites() -> None:
    assert len(BENCHES) >= 8


@pytest.mark.parametrize("name", BENCHES)
def test_each_benchmark_suite_imports(name: str) -> None:
    importlib.import_module(f"benches.{name}")
