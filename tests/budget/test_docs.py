"""docs/hank-file.md's Budgets section says what the run does."""

from __future__ import annotations

from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "hank-file.md"


def test_the_run_ceiling_row_gives_both_exit_codes() -> None:
    # hello --max-cost 0.05 crosses it in review, the last codon: exit 0
    # (test_enforced runs both cases).
    (row,) = [line for line in PAGE.read_text().splitlines() if line.startswith("| run ceiling |")]
    crossing = row.rsplit("|", 2)[-2]
    assert "exit 1 when codons were left to run" in crossing
    assert "exit 0 when the crossing codon was the last" in crossing
