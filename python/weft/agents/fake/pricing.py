"""Claude prices (reference agent-cli-protocols.md §5) and the ``costUSD`` formula.

Prices are held as integers in units of $0.0001 per million tokens, so
``tokens * price`` is an exact integer count of $1e-10 and the fake's
``costUSD`` is the exact formula value rounded once to the nearest float:
an adapter that recomputes §5 gets the same digits.
"""

from __future__ import annotations

from typing import NamedTuple

COST_SCALE = 10**10
"""``cost_units / COST_SCALE`` is dollars."""


class Price(NamedTuple):
    """One row: prices in $0.0001 per million tokens, and the model's limits."""

    prefix: str
    input: int
    write_5m: int
    write_1h: int
    read: int
    output: int
    context_window: int = 200_000
    max_output: int = 64_000


def _row(
    prefix: str,
    inp: float,
    read_ratio: float,
    out: float,
    *,
    max_output: int = 64_000,
    write_5m: float | None = None,
    context_window: int = 200_000,
) -> Price:
    def units(dollars: float) -> int:
        return round(dollars * 10_000)

    return Price(
        prefix,
        units(inp),
        units(inp * 1.25 if write_5m is None else write_5m),
        units(inp * 2),
        units(inp * read_ratio),
        units(out),
        context_window=context_window,
        max_output=max_output,
    )


MILLION_CONTEXT = {"context_window": 1_000_000, "max_output": 128_000}
"""The 5.5 models' limits as Claude Code 2.1.330 reports them in ``modelUsage``."""

# Longest prefix wins. Rows marked [R] in §5 are included so a run with a
# newer model id is priced rather than rejected.
PRICES: tuple[Price, ...] = (
    _row("claude-opus-4-5", 5, 0.1, 25),
    _row("claude-opus-4-6", 5, 0.1, 25),
    _row("claude-opus-4-7", 5, 0.1, 25),
    _row("claude-opus-4-8", 5, 0.1, 25),
    _row("claude-opus-5", 5, 0.1, 25),
    _row("claude-opus-5-5", 4, 0.05, 20, **MILLION_CONTEXT),
    _row("claude-opus-4-1", 15, 0.1, 75, max_output=32_000),
    _row("claude-opus-4-2025", 15, 0.1, 75, max_output=32_000),
    _row("claude-opus-4", 15, 0.1, 75, max_output=32_000),
    _row("claude-3-opus", 15, 0.1, 75, max_output=4_096),
    _row("claude-sonnet-4", 3, 0.1, 15),
    _row("claude-sonnet-5", 2, 0.1, 10),
    # Cache reads at $0.10/MTok: what 2.1.330 billed against the test mock.
    _row("claude-sonnet-5-5", 2, 0.05, 10, **MILLION_CONTEXT),
    _row("claude-3-7-sonnet", 3, 0.1, 15),
    _row("claude-3-5-sonnet", 3, 0.1, 15, max_output=8_192),
    _row("claude-haiku-4-5", 1, 0.1, 5),
    # The base tier only: the fake never sends a prompt above 100k tokens.
    _row("claude-haiku-5-5", 0.1, 0.1, 0.5, **MILLION_CONTEXT),
    _row("claude-3-5-haiku", 0.8, 0.1, 4, max_output=8_192),
    # Haiku 3's 5-minute cache write is $0.30, not 1.25x input (§5 table).
    _row("claude-3-haiku", 0.25, 0.12, 1.25, max_output=4_096, write_5m=0.30),
    Price("<synthetic>", 0, 0, 0, 0, 0),
)

ALIASES = {
    "sonnet": "claude-sonnet-5-5",
    "opus": "claude-opus-5-5",
    "haiku": "claude-haiku-5-5",
}
"""What the aliases mean in Claude Code 2.1.330 (seen in its init line)."""

LEGACY_ALIASES = {
    "sonnet": "claude-sonnet-4-5-20250929",
    "opus": "claude-opus-4-5-20251101",
    "haiku": "claude-haiku-4-5-20251001",
}
"""What they meant before 2.1.330 (``FAKE_AGENT_VERSION`` below it)."""

BACKGROUND_MODEL = "claude-haiku-4-5-20251001"
"""The small model of the pre-2.1.330 background call and of subagents."""


def price_of(model: str) -> Price | None:
    """The row for ``model`` (longest matching prefix), or ``None``."""
    best: Price | None = None
    for row in PRICES:
        if model.startswith(row.prefix) and (best is None or len(row.prefix) > len(best.prefix)):
            best = row
    return best


def cost_units(
    price: Price,
    *,
    input_tokens: int,
    write_5m: int,
    write_1h: int,
    read: int,
    output_tokens: int,
) -> int:
    """The §5 formula, exactly, in units of $1e-10."""
    return (
        input_tokens * price.input
        + write_5m * price.write_5m
        + write_1h * price.write_1h
        + read * price.read
        + output_tokens * price.output
    )


def to_usd(units: int) -> float:
    """Dollars as the nearest float (Python's int division rounds correctly)."""
    return units / COST_SCALE
