"""The fake's Claude price table against the worked examples of §1.4 and §5."""

from __future__ import annotations

from decimal import Decimal

import pytest

from weft.agents.fake.pricing import PRICES, cost_units, price_of, to_usd


def cost(model: str, inp: int, w5: int, read: int, out: int, w1h: int = 0) -> float:
    price = price_of(model)
    assert price is not None
    units = cost_units(
        price, input_tokens=inp, write_5m=w5, write_1h=w1h, read=read, output_tokens=out
    )
    return to_usd(units)


@pytest.mark.parametrize(
    ("model", "tokens", "expected"),
    [
        ("claude-sonnet-4-5-20250929", (10, 5460, 29120, 154), "0.031551"),
        ("claude-haiku-4-5-20251001", (310, 0, 0, 22), "0.00042"),
        ("claude-sonnet-4-5-20250929", (6, 8982, 42853, 583), "0.0553014"),
    ],
)
def test_worked_examples_to_the_digit(
    model: str, tokens: tuple[int, int, int, int], expected: str
) -> None:
    assert repr(cost(model, *tokens)) == expected


def test_one_hour_writes_cost_twice_the_input() -> None:
    assert Decimal(repr(cost("claude-opus-4-5", 0, 0, 0, 0, w1h=1_000_000))) == 10


def test_longest_prefix_wins() -> None:
    opus45, opus41 = price_of("claude-opus-4-5-20251101"), price_of("claude-opus-4-1-20250805")
    assert opus45 is not None
    assert opus41 is not None
    assert (opus45.input, opus41.input) == (50_000, 150_000)
    assert price_of("gpt-5") is None
    synthetic = price_of("<synthetic>")
    assert synthetic is not None
    assert synthetic.output == 0


def test_table_ratios_match_section_5() -> None:
    for row in PRICES:
        if row.prefix in ("<synthetic>", "claude-3-haiku"):
            continue
        assert row.write_5m * 4 == row.input * 5, row.prefix
        assert row.write_1h == 2 * row.input, row.prefix
