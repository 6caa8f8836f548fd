"""Benchmark setup: refuse debug builds, and print each Rust/baseline ratio.

Every speed figure is a ratio against a baseline measured in the same run.
Benchmarks come in groups; in each group the test whose name contains
``baseline`` is the reference, and the summary prints how many times faster
(median against median) every other member of the group is. A benchmark
that records ``extra_info["items"]`` is compared per item, so a slow
baseline may do less of the same work.
"""

from __future__ import annotations

from typing import Any

import pytest

from weft._core import BUILD_PROFILE


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once on a debug build: its numbers would mean nothing."""
    if BUILD_PROFILE != "release":
        pytest.exit(
            "benchmarks need a release build of weft._core (this one is "
            f"{BUILD_PROFILE}); run `make bench`, which installs one",
            returncode=2,
        )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Prints, per group, each benchmark's speed-up over the group's baseline."""
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    groups: dict[str, list[Any]] = {}
    for bench in session.benchmarks:
        groups.setdefault(bench.group or bench.name, []).append(bench)
    lines: list[str] = []
    for group, benches in sorted(groups.items()):
        baselines = [b for b in benches if "baseline" in b.name]
        for b in benches:
            if b in baselines:
                continue
            per_item = b.stats.median / b.extra_info.get("items", 1)
            if not baselines and "summary" in b.extra_info:
                # A benchmark that pairs its own baseline in every round says its ratio itself.
                lines.append(f"{group:<32} {b.name}: {b.extra_info['summary']}")
            for base in baselines:
                ratio = base.stats.median / base.extra_info.get("items", 1) / per_item
                extra = b.extra_info.get("summary", "")
                lines.append(f"{group:<32} {b.name} vs {base.name}: {ratio:.1f}x  {extra}")
    if lines:
        terminalreporter.write_sep("=", "speed-up over the baseline (median per item)")
        for line in lines:
            terminalreporter.write_line(line)
