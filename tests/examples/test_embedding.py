"""The embedding example runs, and docs/embedding.md shows what it really prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_example() -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "embedding.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_the_example_reports_exact_costs_order_and_the_refusal() -> None:
    out = run_example().splitlines()
    assert out == [
        "listener saw 16 transitions, in submission order: True",
        "codon design cost $0.0200",
        "codon build cost $0.6000",
        "run cost $0.6200, total $0.6200",
        "refused: Invalid transition from completed to running (from=completed, to=running)",
        "reloaded from state.json: total $0.6200",
        "current run after RunCompleted: None",
    ]


def test_the_documented_output_is_the_real_output() -> None:
    doc = (ROOT / "docs" / "embedding.md").read_text()
    block = re.search(r"\$ python examples/embedding.py\n(.*?)```", doc, re.S)
    assert block is not None, "docs/embedding.md lost its output block"
    assert block.group(1) == run_example()
