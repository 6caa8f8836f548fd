"""The ledger: every limit kind at every level, every allocation, both onExceeded
values, on an injected clock (no test waits)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.budget import BudgetBook, EarlierSpend, Ledger, Slot
from weft.config.schema import Hank
from weft.progress import NANO, nanos


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def hank(*items: dict[str, Any], budget: dict[str, Any] | None = None) -> Hank:
    doc: dict[str, Any] = {"meta": {"name": "t", "version": "1"}, "hank": list(items)}
    if budget is not None:
        doc["overrides"] = {"budget": budget}
    return msgspec.convert(doc, Hank)


def codon(ident: str, **budget: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "codon",
        "id": ident,
        "name": ident,
        "model": "fake/sonnet",
        "continuationMode": "fresh",
        "promptText": "hi",
    }
    if budget:
        out["budget"] = budget
    return out


def loop(ident: str, *codons: dict[str, Any], **budget: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "loop",
        "id": ident,
        "name": ident,
        "terminateOn": {"type": "iterationLimit", "limit": 5},
        "codons": list(codons),
    }
    if budget:
        out["budget"] = budget
    return out


def ledger(h: Hank, clock: Clock | None = None, **ceiling: float) -> Ledger:
    """A ledger of ``h`` under a run ceiling already resolved (``dollars``, ``seconds``)."""
    book = BudgetBook.from_hank(
        h,
        max_dollars=ceiling.get("dollars"),
        max_seconds=ceiling.get("seconds"),
        source="--max-cost",
    )
    return Ledger(book, clock or Clock())


A, B = Slot("a", "a"), Slot("b", "b")


# --------------------------------------------------------------------------- codon caps


@pytest.mark.parametrize("on_exceeded", ["complete", "fail"])
@pytest.mark.parametrize(
    ("cap", "feed", "kind"),
    [
        ({"maxDollars": 0.10}, lambda lg: lg.add(0.06) or lg.add(0.05), "dollars"),
        ({"maxOutputTokens": 100}, lambda lg: lg.add(0.0, 60) or lg.add(0.0, 41), "outputTokens"),
        ({"maxContextTokens": 1000}, lambda lg: lg.add(0.0, 1, 999) or lg.add(0.0, 1, 1001),
         "contextTokens"),
    ],
)  # fmt: skip
def test_a_codon_cap_trips_on_the_message_that_crosses_it(
    cap: dict[str, Any], feed: Any, kind: str, on_exceeded: str
) -> None:
    lg = ledger(hank(codon("a", **cap, onExceeded=on_exceeded)))
    assert lg.begin(A) is None
    verdict = feed(lg)
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id, verdict.kind) == ("codon", "a", kind)
    assert verdict.on_exceeded == on_exceeded
    assert not verdict.stops_run
    assert verdict.used > verdict.limit
    assert verdict.message.startswith("Budget exceeded: codon a used ")


def test_spending_exactly_a_cap_is_allowed() -> None:
    lg = ledger(hank(codon("a", maxDollars=0.1, maxOutputTokens=10)))
    lg.begin(A)
    assert lg.add(0.1, 10) is None
    assert lg.add(0.000000001) is not None


@pytest.mark.parametrize("on_exceeded", ["complete", "fail"])
def test_a_codon_time_cap_trips_when_the_clock_reaches_it(on_exceeded: str) -> None:
    clock = Clock()
    lg = ledger(hank(codon("a", maxTimeSeconds=5, onExceeded=on_exceeded)), clock)
    lg.begin(A)
    clock.now += 4.999
    assert lg.check() is None
    clock.now += 0.001
    verdict = lg.check()
    assert verdict is not None
    assert verdict.kind == "timeSeconds"
    assert verdict.on_exceeded == on_exceeded


def test_a_codon_cap_is_per_attempt_and_per_iteration() -> None:
    lg = ledger(hank(loop("l", codon("d", maxDollars=0.1))))
    for n in range(3):
        assert lg.begin(Slot(f"d#{n}", "d", "l")) is None
        assert lg.add(0.09) is None
        lg.end("completed")
    assert lg.spent == pytest.approx(0.27)


def test_the_agents_total_replaces_the_estimates() -> None:
    lg = ledger(hank(codon("a", maxDollars=0.1)))
    lg.begin(A)
    assert lg.add(0.08) is None
    # 2.1.330's assistant lines carry output_tokens: 1; the result's total wins.
    verdict = lg.set_total(0.12, 500)
    assert verdict is not None
    assert verdict.used == pytest.approx(0.12)


def test_default_on_exceeded_is_complete() -> None:
    lg = ledger(hank(codon("a", maxDollars=0.1)))
    lg.begin(A)
    verdict = lg.add(0.2)
    assert verdict is not None
    assert verdict.on_exceeded == "complete"


# --------------------------------------------------------------------------- run ceiling


@pytest.mark.parametrize("on_exceeded", ["complete", "fail"])
def test_the_run_ceiling_counts_every_codon_and_stops_the_run(on_exceeded: str) -> None:
    lg = ledger(hank(codon("a"), codon("b"), budget={"onExceeded": on_exceeded}), dollars=0.1)
    lg.begin(A)
    assert lg.add(0.06) is None
    lg.end("completed")
    lg.begin(B)
    verdict = lg.add(0.05)
    assert verdict is not None
    assert (verdict.scope, verdict.kind, verdict.on_exceeded) == ("run", "dollars", on_exceeded)
    assert verdict.stops_run
    assert verdict.used == pytest.approx(0.11)
    assert "(--max-cost)" in verdict.message


def test_the_run_time_ceiling_counts_earlier_runs() -> None:
    clock = Clock()
    lg = ledger(hank(codon("a")), clock, seconds=60)
    lg.restore([], run_seconds=50)
    lg.begin(A)
    clock.now += 9.9
    assert lg.check() is None
    clock.now += 0.1
    verdict = lg.check()
    assert verdict is not None
    assert verdict.scope == "run"
    assert verdict.kind == "timeSeconds"


def test_a_resumed_run_keeps_the_money_earlier_runs_spent() -> None:
    lg = ledger(hank(codon("a"), codon("b")), dollars=0.1)
    lg.restore([EarlierSpend(A, 0.07), EarlierSpend(A, 0.02)])  # a failed attempt and its retry
    assert lg.spent == pytest.approx(0.09)
    lg.begin(B)
    verdict = lg.add(0.011)
    assert verdict is not None
    assert verdict.used == pytest.approx(0.101)


def test_a_used_up_run_lets_no_codon_start() -> None:
    lg = ledger(hank(codon("a"), codon("b")), dollars=0.1)
    lg.restore([EarlierSpend(A, 0.1)])
    verdict = lg.check_run_left(B)
    assert verdict is not None
    assert verdict.stops_run
    assert lg.check_run_left(A) is not None


def test_failed_and_skipped_attempts_count() -> None:
    lg = ledger(hank(codon("a"), codon("b")), dollars=1.0)
    lg.begin(A)
    lg.add(0.3)
    lg.end("skipped")
    lg.begin(A)
    lg.add(0.2)
    lg.end("failed")
    assert lg.spent_nanos == nanos(0.5)
    assert [r.status for r in lg.rows] == ["failed"]
    assert lg.rows[0].dollar_nanos == nanos(0.5)


# --------------------------------------------------------------------------- loops


@pytest.mark.parametrize("on_exceeded", ["complete", "fail"])
def test_a_loop_budget_is_shared_by_its_iterations(on_exceeded: str) -> None:
    lg = ledger(hank(loop("l", codon("d"), maxDollars=0.25, onExceeded=on_exceeded)))
    verdict = None
    n = 0
    while verdict is None:
        lg.begin(Slot(f"d#{n}", "d", "l"))
        verdict = lg.add(0.1)
        lg.end("completed")
        n += 1
    assert n == 3
    assert (verdict.scope, verdict.scope_id, verdict.on_exceeded) == ("loop", "l", on_exceeded)
    assert not verdict.stops_run


def test_a_loop_time_budget_sums_its_codons_time() -> None:
    clock = Clock()
    lg = ledger(hank(loop("l", codon("d"), maxTimeSeconds=5)), clock)
    lg.begin(Slot("d#0", "d", "l"))
    clock.now += 3
    lg.end("completed")
    clock.now += 100  # time outside the loop's codons does not count
    lg.begin(Slot("d#1", "d", "l"))
    clock.now += 1.9
    assert lg.check() is None
    clock.now += 0.1
    verdict = lg.check()
    assert verdict is not None
    assert verdict.scope == "loop"
    assert verdict.kind == "timeSeconds"


def test_a_codon_outside_the_loop_does_not_draw_on_its_budget() -> None:
    lg = ledger(hank(codon("a"), loop("l", codon("d"), maxDollars=0.1)))
    lg.begin(A)
    assert lg.add(5.0) is None


# --------------------------------------------------------------------------- allocation


def test_shared_is_first_come_first_served() -> None:
    lg = ledger(hank(codon("a"), codon("b"), budget={"allocation": "shared"}), dollars=0.1)
    lg.begin(A)
    assert lg.add(0.09) is None  # a may take nearly everything
    lg.end("completed")
    lg.begin(B)
    verdict = lg.add(0.02)
    assert verdict is not None
    assert verdict.scope == "run"


@pytest.mark.parametrize("allocation", ["proportional", "proportional-strict"])
def test_proportional_shares_cap_each_child(allocation: str) -> None:
    budget = {"maxDollars": 1.0, "allocation": allocation, "shares": {"a": 0.3}}
    lg = ledger(hank(codon("a"), codon("b"), codon("c"), budget=budget), dollars=1.0)
    lg.begin(A)
    verdict = lg.add(0.31)
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id) == ("share", "a")
    assert verdict.limit == pytest.approx(0.3)


def test_proportional_without_shares_splits_evenly() -> None:
    budget = {"maxDollars": 0.9, "allocation": "proportional-strict"}
    lg = ledger(hank(codon("a"), codon("b"), codon("c"), budget=budget), dollars=0.9)
    lg.begin(A)
    verdict = lg.add(0.31)
    assert verdict is not None
    assert verdict.limit == pytest.approx(0.3)


@pytest.mark.parametrize(("allocation", "b_may_spend"), [
    ("proportional", 0.5 + 0.4),        # what a left rolls over to b
    ("proportional-strict", 0.5),       # shares are hard caps
])  # fmt: skip
def test_what_a_child_leaves_rolls_over_unless_strict(allocation: str, b_may_spend: float) -> None:
    budget = {"maxDollars": 1.0, "allocation": allocation, "shares": {"a": 0.5, "b": 0.5}}
    lg = ledger(hank(codon("a"), codon("b"), budget=budget), dollars=1.0)
    lg.begin(A)
    lg.add(0.1)
    lg.end("completed")
    lg.begin(B)
    assert lg.add(b_may_spend) is None
    verdict = lg.add(0.001)
    assert verdict is not None
    assert verdict.scope in ("share", "run")


def test_a_loop_is_one_child_of_the_run() -> None:
    budget = {"maxDollars": 1.0, "allocation": "proportional-strict", "shares": {"l": 0.2}}
    lg = ledger(hank(codon("a"), loop("l", codon("d")), budget=budget), dollars=1.0)
    for n in range(2):
        lg.begin(Slot(f"d#{n}", "d", "l"))
        verdict = lg.add(0.15)
        lg.end("completed")
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id) == ("share", "l")


def test_loop_shares_are_by_codon_over_all_iterations() -> None:
    inner = loop(
        "l", codon("x"), codon("y"),
        maxDollars=1.0, allocation="proportional-strict", shares={"x": 0.25, "y": 0.75},
    )  # fmt: skip
    lg = ledger(hank(inner))
    lg.begin(Slot("x#0", "x", "l"))
    assert lg.add(0.2) is None
    lg.end("completed")
    lg.begin(Slot("x#1", "x", "l"))
    verdict = lg.add(0.06)
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id) == ("share", "x")


def test_a_restored_child_is_finished_once_another_began_after_it() -> None:
    """Restored in the order they began: a (done), then b, stopped mid-attempt.
    The continued run starts b again: what a left rolls over to it (b's
    earlier spend counts against its share); b began last, so it is not finished."""
    budget = {"maxDollars": 0.9, "allocation": "proportional"}
    lg = ledger(hank(codon("a"), codon("b"), codon("c"), budget=budget), dollars=0.9)
    lg.restore([EarlierSpend(A, 0.1), EarlierSpend(B, 0.05)])
    lg.begin(B)
    assert lg.add(0.45) is None  # 0.3 of its own + the 0.2 a left - the 0.05 it spent
    verdict = lg.add(0.001)
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id) == ("share", "b")
    assert verdict.limit == pytest.approx(0.5)


# --------------------------------------------------------------------------- unpriced, sentinels


def test_an_unpriced_model_is_counted_as_unknown_not_free() -> None:
    lg = ledger(hank(codon("a"), codon("b")), dollars=1.0)
    lg.begin(A)
    assert lg.add(None, 100, 2000) is None
    assert lg.unpriced == 1
    lg.end("completed")
    lg.begin(B)
    lg.add(0.5)
    lg.end("completed")
    assert lg.unpriced == 1
    assert lg.spent == pytest.approx(0.5)
    assert lg.rows[0].unpriced
    assert not lg.rows[1].unpriced


def test_sentinel_spend_counts_against_the_run_not_the_codon() -> None:
    lg = ledger(hank(codon("a", maxDollars=0.1)), dollars=0.2)
    lg.begin(A)
    assert lg.add(0.09) is None
    assert lg.add_sentinel("a", 0.05) is None  # the codon's own cap is untouched
    verdict = lg.add_sentinel("a", 0.07)
    assert verdict is not None
    assert verdict.scope == "run"
    assert lg.spent == pytest.approx(0.21)


def test_an_earlier_runs_sentinel_spend_counts_against_the_loop_not_the_codon() -> None:
    lg = ledger(hank(loop("l", codon("d", maxDollars=0.07), maxDollars=0.15)))
    lg.restore([EarlierSpend(Slot("d#0", "d", "l"), 0.05, sentinel_dollars=0.05)])
    assert lg.spent == pytest.approx(0.1)
    lg.begin(Slot("d#1", "d", "l"))
    assert lg.add(0.04) is None
    verdict = lg.add(0.02)  # the codon's own 0.07 holds: the loop's 0.15 does not
    assert verdict is not None
    assert (verdict.scope, verdict.scope_id) == ("loop", "l")
    assert verdict.used == pytest.approx(0.16)


def test_an_earlier_unpriced_attempt_is_restored_as_unknown_not_free() -> None:
    lg = ledger(hank(codon("a"), codon("b")), dollars=1.0)
    lg.restore([EarlierSpend(A, 0.0, unpriced=True), EarlierSpend(B, 0.2)])
    assert lg.unpriced == 1
    assert lg.spent == pytest.approx(0.2)  # a lower bound


# --------------------------------------------------------------------------- properties


@given(st.lists(st.integers(min_value=0, max_value=10**8), min_size=1, max_size=40))
def test_the_ledgers_total_is_the_exact_sum_of_the_spending(amounts: list[int]) -> None:
    lg = ledger(hank(codon("a"), codon("b")))
    slots = [A, B]
    for i, amount in enumerate(amounts):
        lg.begin(slots[i % 2])
        lg.add(amount / NANO)
        lg.end("completed" if i % 3 else "skipped")
    assert lg.spent_nanos == sum(amounts)
    assert sum(r.dollar_nanos for r in lg.rows) == sum(amounts)


@given(
    st.floats(min_value=0.01, max_value=10),
    st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=30),
)
def test_a_ceiling_trips_exactly_when_the_running_total_passes_it(
    ceiling: float, amounts: list[float]
) -> None:
    lg = ledger(hank(codon("a")), dollars=ceiling)
    lg.begin(A)
    total = 0
    for amount in amounts:
        total += nanos(amount)
        verdict = lg.add(amount)
        assert (verdict is not None) == (total / NANO > ceiling)
        if verdict is not None:
            break


@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(min_value=0, max_value=10**6), max_size=4),
            st.integers(min_value=0, max_value=3 * 10**6),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_running_totals_of_several_sessions_count_each_session_once(
    sessions: list[tuple[list[int], int]],
) -> None:
    """One attempt, several sessions (extensions, resumes): estimates per
    message, then the attempt's running total after each session's result."""
    lg = ledger(hank(codon("a")))
    lg.begin(A)
    billed = 0
    for estimates, final in sessions:
        for amount in estimates:
            lg.add(amount / NANO)
        # The runner bills the codon its earlier sessions plus this one's own figure.
        billed += max(final, sum(estimates))
        lg.set_total(billed / NANO, 0)
        assert lg.spent_nanos == billed
    lg.end("completed")
    assert lg.spent_nanos == billed
    assert lg.rows[0].dollar_nanos == billed


def test_a_total_below_the_estimates_never_takes_spend_back() -> None:
    lg = ledger(hank(codon("a")))
    lg.begin(A)
    lg.add(0.0063, 5)
    # A stopped session's result that says less than its message did.
    lg.set_total(0.0, 1)
    assert lg.spent == pytest.approx(0.0063)
    assert lg.rows[0].output_tokens == 0  # committed at end()
    lg.end("completed")
    assert lg.rows[0].output_tokens == 5
