"""Honest money, golden on the fake agents: a resumed Claude session is billed
per process (its result's total is cumulative), the totals and the budget
carry exactly that, and a model without a price is ``unpriced`` / ``null``,
never $0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.budget.test_enforced import events, weft
from tests.runtime.hanks import codon, codon_records, read_state, subprocess_environment, write_hank


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return subprocess_environment(tmp_path)


def result_totals(execution: Path) -> dict[str, float]:
    """Codon id -> the ``total_cost_usd`` its agent's result line reported."""
    out = {}
    for log in (execution / ".weft" / "runs").glob("*/*-claude.log"):
        for line in log.read_text().splitlines():
            if '"type":"result"' in line.replace(" ", ""):
                out[log.name.removesuffix("-claude.log")] = json.loads(line)["total_cost_usd"]
    return out


def test_a_resume_chain_is_billed_per_process_and_the_totals_carry_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(
        tmp_path / "hank",
        codon("a"),
        codon("b", mode="continue-previous"),
        codon("c", mode="continue-previous"),
    )
    execution = tmp_path / "x"
    assert weft("run", hank, "-e", execution, "--headless", env=env).returncode == 0
    records = codon_records(read_state(execution))
    cumulative = result_totals(execution)
    # The CLI's result total is the whole session's; each codon pays its own process.
    assert cumulative["a"] < cumulative["b"] < cumulative["c"]
    assert records["a"]["finalCost"] == pytest.approx(cumulative["a"])
    assert records["b"]["finalCost"] == pytest.approx(cumulative["b"] - cumulative["a"])
    assert records["c"]["finalCost"] == pytest.approx(cumulative["c"] - cumulative["b"])
    total = sum(r["finalCost"] for r in records.values())
    assert total == pytest.approx(cumulative["c"])
    (summary,) = events(execution, "budget.summary")
    assert summary["actualDollars"] == pytest.approx(total)
    status = json.loads(weft("status", execution, "--json", env=env).stdout)
    assert status["totalCost"] == pytest.approx(total)
    assert status["spent"] == pytest.approx(total)


def test_an_unpriced_model_is_unpriced_in_views_and_null_in_json(
    tmp_path: Path, env: dict[str, str]
) -> None:
    hank = write_hank(tmp_path / "hank", codon("a", model="fake/openai/gpt-5.2"), codon("b"))
    execution = tmp_path / "x"
    run = weft("run", hank, "-e", execution, "--headless", env=env)
    assert run.returncode == 0, run.stdout
    assert "a: completed in" in run.stdout
    assert "(unpriced, " in run.stdout
    assert "$0.0000" not in run.stdout
    assert "(1 codon unpriced)" in run.stdout
    (a_done,) = [e for e in events(execution, "codon.completed") if e["codonId"] == "a"]
    assert a_done["cost"] is None
    (summary,) = events(execution, "budget.summary")
    assert summary["unpricedCodons"] == 1
    assert next(r["dollars"] for r in summary["rows"]) is None

    status = weft("status", execution, env=env).stdout
    assert "total cost: ≥ $" in status
    assert "(1 codon unpriced)" in status
    assert "unpriced" in next(line for line in status.splitlines() if line.strip().startswith("a "))
    as_json = json.loads(weft("status", execution, "--json", env=env).stdout)
    (a,) = [c for c in as_json["runs"][0]["codons"] if c["codonId"] == "a"]
    assert a["cost"] is None
    assert a["unpriced"] is True
    assert as_json["unpricedCodons"] == 1

    jsonl = weft("run", hank, "-e", tmp_path / "y", "--json", env=env).stdout.splitlines()
    end = json.loads(jsonl[-1])
    assert end["type"] == "run.summary"
    assert end["data"]["unpricedCodons"] == 1
