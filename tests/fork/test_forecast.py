"""The forecaster (:mod:`weft.fork.forecast`): its arithmetic as tables over Weft's
own structs (a plan from a real hank, attempts as ``read_history`` makes them,
a pricing table parsed from TOML whose prices are known here), and
``read_history`` over real executions of the fake agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.runtime.hanks import codon, loop, subprocess_environment, weft_cli, write_hank

from weft.agents.events import Tokens
from weft.agents.pricing import PricingTable
from weft.config import load_hank
from weft.fork.forecast import Attempt, History, forecast, percentile, read_history
from weft.plan import ExecutionPlan

TABLE = PricingTable.parse(
    """
[[model]]
prefix = "claude-test-big"
effective_from = 2020-01-01
source = "tests"
verified = true
input = 1
cache_write_5m = 2
cache_write_1h = 4
cache_read = 0.5
output = 10
""",
    "tests",
)
"""A price table with round prices: $1/MTok in, $10/MTok out, $2 cache writes, $0.50 reads."""


def plan_of(tmp_path: Path, *items: dict[str, object]) -> ExecutionPlan:
    return ExecutionPlan.from_hank(load_hank(write_hank(tmp_path / "hank", *items)).hank)


def attempt(
    execution: str,
    codon_id: str,
    cost: float,
    seconds: float = 1.0,
    *,
    model: str = "fake/sonnet",
    completed: bool = True,
    tokens: Tokens | None = None,
) -> Attempt:
    return Attempt(execution, codon_id, model, completed, cost, seconds, tokens)


def history(*attempts: Attempt) -> History:
    return History(tuple(dict.fromkeys(a.execution for a in attempts)), attempts)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 0.5, 5.0),
        ([5.0], 0.9, 5.0),
        ([3.0, 1.0, 2.0], 0.5, 2.0),
        ([1.0, 2.0, 3.0], 0.9, 2.8),
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
        ([10.0, 0.0], 0.9, 9.0),
    ],
)
def test_percentile_interpolates_between_ranks(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_medians_and_p90_of_the_same_codon_on_the_same_model_and_their_totals(
    tmp_path: Path,
) -> None:
    plan = plan_of(tmp_path, codon("a"), codon("b"))
    found = forecast(
        plan,
        history(
            attempt("x1", "a", 1.0, 10), attempt("x1", "b", 0.1, 1),
            attempt("x2", "a", 3.0, 30), attempt("x2", "b", 0.3, 3),
            attempt("x3", "a", 2.0, 20), attempt("x3", "b", 0.2, 2),
        ),
        TABLE,
    )  # fmt: skip
    a, b = found.codons
    assert (a.basis, a.samples) == ("history", 3)
    assert a.cost is not None
    assert b.cost is not None
    assert a.seconds is not None
    assert (a.cost.median, a.cost.p90) == pytest.approx((2.0, 2.8))
    assert (a.seconds.median, a.seconds.p90) == pytest.approx((20.0, 28.0))
    assert found.cost is not None
    assert found.seconds is not None
    assert found.cost.median == pytest.approx(a.cost.median + b.cost.median)
    assert found.cost.p90 == pytest.approx(a.cost.p90 + b.cost.p90)
    assert found.seconds.median == pytest.approx(22.0)
    assert found.executions == 3
    assert found.unknown == ()


def test_a_retry_is_spent_too_and_an_execution_that_never_finished_the_codon_is_no_sample(
    tmp_path: Path,
) -> None:
    plan = plan_of(tmp_path, codon("a"))
    found = forecast(
        plan,
        history(
            # x1 failed a once (0.5 spent) then finished it (1.0): it cost 1.5.
            attempt("x1", "a", 0.5, completed=False), attempt("x1", "a", 1.0),
            attempt("x2", "a", 1.5),
            # x3 only ever failed at a: it says nothing of what finishing a takes.
            attempt("x3", "a", 99.0, completed=False),
        ),
        TABLE,
    )  # fmt: skip
    (a,) = found.codons
    assert a.samples == 2
    assert a.cost is not None
    assert (a.cost.median, a.cost.p90) == pytest.approx((1.5, 1.5))
    assert a.seconds is not None
    assert a.seconds.median == pytest.approx(1.5)


def test_other_models_history_is_priced_from_its_median_tokens_for_the_new_model(
    tmp_path: Path,
) -> None:
    plan = plan_of(tmp_path, codon("a", model="fake/claude-test-big"))
    found = forecast(
        plan,
        history(
            *(
                attempt(f"x{n}", "a", 0.01, tokens=Tokens(input=n * 1000, output=n * 100))
                for n in (1, 2, 3)
            )
        ),
        TABLE,
    )
    (a,) = found.codons
    assert a.basis == "tokens"
    assert "fake/sonnet" in a.note
    # Median tokens: 2,000 in ($1/MTok) and 200 out ($10/MTok) = $0.004; at p90
    # 2,800 in and 280 out = $0.0056. Not the $0.01 the other model cost.
    assert a.cost is not None
    assert (a.cost.median, a.cost.p90) == pytest.approx((0.004, 0.0056))
    assert a.seconds is not None
    assert a.seconds.median == pytest.approx(1.0)


def test_a_new_model_without_a_price_is_unknown_and_says_why(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, codon("a", model="fake/opus"), codon("b"))
    found = forecast(
        plan,
        history(attempt("x1", "a", 1.0, tokens=Tokens(input=5)), attempt("x1", "b", 0.25)),
        TABLE,
    )
    a, _b = found.codons
    assert (a.basis, a.cost) == ("unknown", None)
    assert "fake/opus has no price" in a.note
    assert found.unknown == ("a",)
    assert found.cost is not None
    assert found.cost.median == pytest.approx(0.25)


def test_no_history_is_unknown(tmp_path: Path) -> None:
    found = forecast(plan_of(tmp_path, codon("a"), codon("b")), History((), ()), TABLE)
    assert [c.basis for c in found.codons] == ["unknown", "unknown"]
    assert found.cost is None
    assert found.seconds is None
    assert found.unknown == ("a", "b")
    assert found.to_json()["total"] == {"cost": None, "seconds": None, "unknown": ["a", "b"]}


def test_a_loop_codon_is_every_iteration_of_an_execution_together(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, loop("l", codon("w"), limit=3))
    found = forecast(
        plan,
        history(
            attempt("x1", "w#0", 1.0), attempt("x1", "w#1", 1.0), attempt("x1", "w#2", 1.0),
            attempt("x2", "w#0", 2.0),
        ),
        TABLE,
    )  # fmt: skip
    (w,) = found.codons
    assert (w.codon_id, w.loop, w.samples) == ("w#0", True, 2)
    assert w.cost is not None
    assert w.cost.median == pytest.approx(2.5)


def test_a_skipped_codon_counts_for_nothing(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, codon("a"), codon("b"))
    found = forecast(
        plan, history(attempt("x1", "a", 1.0), attempt("x1", "b", 2.0)), TABLE, skip={"b"}
    )
    assert [c.basis for c in found.codons] == ["history", "skipped"]
    assert found.cost is not None
    assert found.cost.median == pytest.approx(1.0)
    assert found.unknown == ()


def test_read_history_reads_the_hanks_executions_once_each(tmp_path: Path) -> None:
    env = subprocess_environment(tmp_path)
    hank = write_hank(tmp_path / "hank", codon("a"), codon("b", mode="continue-previous"))
    other = write_hank(tmp_path / "other", codon("a"))
    for path in (hank, hank, other):
        assert weft_cli("run", path, "--new", "--headless", env=env).returncode == 0
    managed = tmp_path / "managed"
    # A fork carries its source's records of a: they are not a second sample.
    source = next(p for p in managed.iterdir() if _hank_of(p) == str(hank.resolve()))
    forked = weft_cli("fork", source, "--from", "b", "--no-run", env=env)
    assert forked.returncode == 0, forked.stderr
    found = read_history(managed, hank)
    assert len(found.executions) == 3  # two runs and the fork; not the other hank's
    a_done = [x for x in found.attempts if x.codon_id == "a" and x.completed]
    assert len(a_done) == 2
    assert {x.model for x in found.attempts} == {"fake/sonnet"}
    assert all(x.cost > 0 and x.seconds is not None and x.tokens for x in a_done)
    assert read_history(tmp_path / "nowhere", hank) == History((), ())


def _hank_of(execution: Path) -> str:
    return str(json.loads((execution / ".weft" / "execution-meta.json").read_text())["hankPath"])
