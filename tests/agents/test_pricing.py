"""The price table and the cost formula (reference agent-cli-protocols §5).

Expected figures are worked out from the reference's table by hand."""

from __future__ import annotations

import datetime as dt
import tomllib
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weft.agents.events import Tokens
from weft.agents.pricing import (
    PricingError,
    PricingTable,
    cost_usd,
    default_table,
    normalize_model,
    round_pico,
)

TABLE_FILE = Path(__file__).parents[2] / "python" / "weft" / "agents" / "pricing.toml"
DAY = dt.date(2026, 1, 20)


def test_reference_examples_to_the_last_digit() -> None:
    sonnet = Tokens(input=10, output=154, cache_creation=5460, cache_read=29120)
    assert cost_usd("claude-sonnet-4-5-20250929", sonnet, DAY) == 0.031551
    assert cost_usd("claude-haiku-4-5-20251001", Tokens(input=310, output=22), DAY) == 0.00042
    real = Tokens(input=6, output=583, cache_creation=8982, cache_read=42853)
    assert cost_usd("claude-sonnet-4-5-20250929", real, DAY) == 0.0553014


def test_cache_writes_by_lifetime() -> None:
    five = Tokens(cache_creation=1_000_000)
    hour = Tokens(cache_creation=1_000_000, cache_creation_1h=1_000_000)
    half = Tokens(cache_creation=1_000_000, cache_creation_1h=500_000)
    model = "claude-opus-4-5-20251101"
    assert cost_usd(model, five, DAY) == 6.25
    assert cost_usd(model, hour, DAY) == 10.0
    assert cost_usd(model, half, DAY) == 6.25 / 2 + 10.0 / 2
    assert cost_usd(model, Tokens(cache_read=1_000_000), DAY) == 0.5
    assert cost_usd(model, Tokens(input=1_000_000, output=1_000_000), DAY) == 30.0


@pytest.mark.parametrize(
    ("model", "input_price"),
    [
        ("claude-opus-4-5-20251101", 5),
        ("claude-opus-4-20250514", 15),
        ("claude-opus-4-0", 15),
        ("claude-opus-4-1-20250805", 15),
        ("claude-sonnet-4-20250514", 3),
        ("claude-3-5-haiku-20241022", 0.8),
        ("claude-3-haiku-20240307", 0.25),
        ("gpt-5-2025-08-07", 1.25),
        ("gpt-5-mini-2025-08-07", 0.25),
        ("gpt-5.1-codex-mini", 0.25),
        ("gemini-2.5-flash-lite", 0.1),
        ("gemini-2.5-flash", 0.3),
    ],
)
def test_longest_prefix_at_a_dash_boundary_wins(model: str, input_price: float) -> None:
    assert cost_usd(model, Tokens(input=1_000_000), DAY) == input_price


@pytest.mark.parametrize(
    "model", ["sonnet", "opus", "haiku", "gpt-5.2", "claude-sonnet-45", "llama-3", ""]
)
def test_aliases_and_unknown_models_are_unpriced(model: str) -> None:
    assert cost_usd(model, Tokens(input=1000), DAY) is None


def test_synthetic_messages_cost_nothing() -> None:
    assert cost_usd("<synthetic>", Tokens(input=10**6, output=10**6), DAY) == 0.0


@pytest.mark.parametrize(
    "model",
    [
        "anthropic/claude-sonnet-4-5",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "claude-sonnet-4-5@20250929",
        "claude-sonnet-4-5-20250929[1m]",
        "Claude-Sonnet-4-5",
    ],
)
def test_provider_and_cloud_spellings_are_normalised(model: str) -> None:
    assert normalize_model(model).startswith("claude-sonnet-4-5")
    assert cost_usd(model, Tokens(output=1_000_000), DAY) == 15.0


def test_effective_dates_pick_the_price_of_the_day() -> None:
    reads = Tokens(cache_read=1_000_000)
    model = "claude-sonnet-5-5"
    assert cost_usd(model, reads, dt.date(2026, 10, 6)) == 0.2
    assert cost_usd(model, reads, dt.date(2026, 10, 7)) == 0.1
    # Before a model's first row its first price applies (the clock was wrong).
    assert cost_usd(model, reads, dt.date(2020, 1, 1)) == 0.2


def test_long_context_tier_applies_to_one_large_request_only() -> None:
    big = Tokens(input=150_000, cache_read=60_000, output=1_000)
    sonnet45 = "claude-sonnet-4-5-20250929"
    standard = (150_000 * 3 + 60_000 * 0.30 + 1_000 * 15) / 1e6
    long = (150_000 * 6 + 60_000 * 0.60 + 1_000 * 22.5) / 1e6
    assert cost_usd(sonnet45, big, DAY, per_request=True) == pytest.approx(long, abs=1e-12)
    assert cost_usd(sonnet45, big, DAY) == pytest.approx(standard, abs=1e-12)
    at_limit = Tokens(input=200_000)
    assert cost_usd(sonnet45, at_limit, DAY, per_request=True) == 0.6
    # Sonnet 4.6 has no surcharge.
    assert cost_usd("claude-sonnet-4-6", big, DAY, per_request=True) == pytest.approx(standard)


def test_haiku_5_5_is_priced_by_prompt_size() -> None:
    small, large = Tokens(input=100_000, output=1000), Tokens(input=100_001, output=1000)
    assert cost_usd("claude-haiku-5-5", small, DAY, per_request=True) == pytest.approx(
        (100_000 * 0.10 + 1000 * 0.50) / 1e6
    )
    assert cost_usd("claude-haiku-5-5", large, DAY, per_request=True) == pytest.approx(
        (100_001 * 0.50 + 1000 * 2.50) / 1e6
    )


ROW = """
[[model]]
prefix = "m"
effective_from = 2025-01-01
input = {price}
cache_write_5m = 0
cache_write_1h = 0
cache_read = 0
output = 0
source = "test"
verified = false
"""


@pytest.mark.parametrize(("tokens", "nanos"), [(1, 0), (3, 2), (5, 2), (7, 4), (9, 4)])
def test_rounding_to_nano_dollars_is_half_to_even(tokens: int, nanos: int) -> None:
    # 0.0005 $/MTok = 500 pico-dollars per token: 1 token is half a nano-dollar.
    table = PricingTable.parse(ROW.format(price="0.0005"))
    assert table.cost_nanos("m", Tokens(input=tokens), DAY) == nanos


@given(
    st.sampled_from(sorted({r.prefix for r in default_table().rows})),
    st.builds(
        Tokens,
        input=st.integers(0, 10**9),
        output=st.integers(0, 10**8),
        cache_creation=st.integers(0, 10**9),
        cache_read=st.integers(0, 10**9),
    ),
)
def test_cost_is_exact_before_one_rounding(prefix: str, tokens: Tokens) -> None:
    rows = tomllib.loads(TABLE_FILE.read_text(), parse_float=Decimal)["model"]
    row = max((r for r in rows if r["prefix"] == prefix), key=lambda r: r["effective_from"])
    exact = (
        tokens.input * Decimal(row["input"])
        + tokens.cache_creation * Decimal(row["cache_write_5m"])
        + tokens.cache_read * Decimal(row["cache_read"])
        + tokens.output * Decimal(row["output"])
    ) * 1000  # USD per MTok * tokens * 1000 = nano-dollars
    late = dt.date(2030, 1, 1)
    assert default_table().cost_nanos(prefix, tokens, late) == round(Fraction(exact))


def test_round_pico_matches_python_round() -> None:
    for pico in range(-3000, 3000, 7):
        assert round_pico(pico) == round(Fraction(pico, 1000))


def test_the_shipped_table_is_complete_and_marks_unverified_rows() -> None:
    table = default_table()
    prefixes = {r.prefix for r in table.rows}
    assert {"claude-sonnet-4-5", "claude-opus-4-5", "claude-haiku-4-5", "gpt-5"} <= prefixes
    assert {"gemini-2.5-pro", "gemini-2.5-flash"} <= prefixes
    for row in table.rows:
        assert row.source
        if row.prefix.startswith(("gpt-", "gemini-")):
            assert not row.verified  # nothing cross-checked them against a real bill


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not toml [", "not valid TOML"),
        ("x = 1", r"no \[\[model\]\] rows"),
        ("stray = 1\n" + ROW.format(price="1"), "unknown top-level keys"),
        (ROW.format(price="1").replace('prefix = "m"\n', ""), "missing prefix"),
        (ROW.format(price="1").replace("2025-01-01", '"2025-01-01"'), "effective_from"),
        (ROW.format(price="-1"), "negative or has more than six decimals"),
        (ROW.format(price="0.0000001"), "more than six decimals"),
        (ROW.format(price='"3"'), "input must be a number"),
        (ROW.format(price="1").replace("verified = false", "verified = 1"), "verified"),
        (ROW.format(price="1").replace("source", "sauce"), "unknown keys"),
        (ROW.format(price="1") + ROW.format(price="2"), "share an effective_from"),
        (
            ROW.format(price="1") + "[[model.tier]]\nabove_prompt_tokens = 0\n",
            "above_prompt_tokens must be a positive integer",
        ),
    ],
)
def test_a_bad_table_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(PricingError, match=message):
        PricingTable.parse(text, "prices.toml")


def test_loading_a_missing_file_is_a_pricing_error(tmp_path: Path) -> None:
    with pytest.raises(PricingError, match="cannot read the price table"):
        PricingTable.load(tmp_path / "nope.toml")
