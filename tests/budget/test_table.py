"""``weft validate``'s budget table and the W1-W10 warnings of the budget package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.budget.test_ledger import codon, hank, loop

from weft.budget import BudgetBook
from weft.budget.table import budget_table, budget_warnings, is_priced, render_table


def codes(book: BudgetBook, h: Any) -> list[str]:
    return [w.code for w in budget_warnings(book, h, priced=lambda m: "gpt" not in m)]


def test_the_table_lists_the_ceiling_loops_codons_and_allotments() -> None:
    h = hank(
        codon("a", maxDollars=0.2),
        loop("l", codon("d", maxTimeSeconds=30, onExceeded="fail"), maxDollars=0.5),
        budget={"maxDollars": 1.0, "allocation": "proportional", "shares": {"a": 0.25}},
    )
    book = BudgetBook.from_hank(h, max_dollars=1.0, source="--max-cost")
    rows = budget_table(book, h)
    assert [r.scope for r in rows] == ["run", "codon a", "loop l", "codon d"]
    assert rows[1].allotted == pytest.approx(0.25)
    assert rows[2].allotted == pytest.approx(0.75)
    assert rows[3].on_exceeded == "fail"
    text = render_table(rows)
    assert "run (proportional) [--max-cost]" in text
    assert "$0.7500" in text


@pytest.mark.parametrize(
    ("items", "budget", "expected"),
    [
        # W1: a cap above its share (but within the pool).
        ((codon("a", maxDollars=0.6), codon("b")),
         {"maxDollars": 1.0, "allocation": "proportional-strict", "shares": {"a": 0.5}}, "W1"),
        # W2: strict shares that leave part of the pool to no one.
        ((codon("a"), codon("b")),
         {"maxDollars": 1.0, "allocation": "proportional-strict",
          "shares": {"a": 0.5, "b": 0.3}}, "W2"),
        # W4: an unpriced model under a dollar budget.
        ((codon("a") | {"model": "fake/openai/gpt-5.2"},), {"maxDollars": 1.0}, "W4"),
        # W5: shares that leave nothing for a child.
        ((codon("a"), codon("b")),
         {"maxDollars": 1.0, "allocation": "proportional", "shares": {"a": 1.0}}, "W5"),
        # W7: a fail codon after another in a shared pool.
        ((codon("a"), codon("b", onExceeded="fail", maxDollars=0.1)), {"maxDollars": 1.0}, "W7"),
    ],
)  # fmt: skip
def test_each_warning(
    items: tuple[dict[str, Any], ...], budget: dict[str, Any], expected: str
) -> None:
    h = hank(*items, budget=budget)
    book = BudgetBook.from_hank(h, max_dollars=budget.get("maxDollars"))
    assert expected in codes(book, h)


def test_w9_a_loop_above_a_ceiling_set_outside_the_hank() -> None:
    h = hank(loop("l", codon("d"), maxDollars=2.0))
    assert codes(BudgetBook.from_hank(h, max_dollars=1.0), h) == ["W9"]
    assert codes(BudgetBook.from_hank(h, max_dollars=3.0), h) == []


def test_w10_a_time_budget_on_a_context_loop() -> None:
    inner = loop("l", codon("d") | {"continuationMode": "continue-previous"}, maxTimeSeconds=60)
    inner["terminateOn"] = {"type": "contextExceeded"}
    h = hank(codon("a"), inner)
    assert codes(BudgetBook.from_hank(h), h) == ["W10"]


def test_a_hank_without_budgets_has_no_table_and_no_warnings() -> None:
    h = hank(codon("a") | {"model": "fake/openai/gpt-5.2"})
    book = BudgetBook.from_hank(h)
    assert not book.any
    assert codes(book, h) == []


def test_claude_reports_its_own_cost_and_unknown_models_are_unpriced() -> None:
    assert is_priced("sonnet")
    assert is_priced("fake/sonnet")
    assert not is_priced("openai/gpt-99-unknown")


def test_weft_validate_prints_the_table_and_the_warnings(tmp_path: Path) -> None:
    h = {
        "meta": {"name": "v", "version": "1"},
        "overrides": {"budget": {"maxDollars": 1.0}},
        "hank": [codon("a"), codon("b", onExceeded="fail", maxDollars=0.1)],
    }
    path = tmp_path / "hank.json"
    path.write_text(json.dumps(h))
    result = subprocess.run(
        [sys.executable, "-m", "weft", "validate", str(path)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "budgets:" in result.stdout
    assert "run [overrides.budget]" in result.stdout
    assert "warning W7 at $.hank[1].budget.onExceeded" in result.stdout
    as_json = json.loads(
        subprocess.run(
            [sys.executable, "-m", "weft", "validate", str(path), "--json"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        ).stdout
    )
    assert [r["scope"] for r in as_json["budgets"]["table"]] == ["run", "codon b"]
    assert [w["code"] for w in as_json["budgets"]["warnings"]] == ["W7"]
