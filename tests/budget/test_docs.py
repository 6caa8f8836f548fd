"""docs/hank-file.md's Budgets section says what the run does."""

from __future__ import annotations

from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "hank-file.md"


def test_the_run_ceiling_row_gives_both_exit_codes() -> None:
    # A stop by the budget exits 3 and leaves the cut codon to do; a crossing by the
    # last codon that completed anyway exits 0 (test_enforced runs both cases).
    (row,) = [line for line in PAGE.read_text().splitlines() if line.startswith("| run ceiling |")]
    crossing = row.rsplit("|", 2)[-2]
    assert "stays to do" in crossing
    assert "exit 3" in crossing
    assert "Exit 0 only when the crossing codon was the last and completed" in crossing
