"""Money as every view says it: nano-dollars, and dollars as they are known.

Light on purpose (no I/O, no imports beyond the standard library): ``weft
status`` and ``weft ls`` word costs with it without loading the run's views.
A model without a price is ``unpriced``, never ``$0``; a total with unpriced
parts is a lower bound (``≥ $X``).
"""

from __future__ import annotations

NANO = 1_000_000_000


def nanos(usd: float) -> int:
    """Dollars as whole nano-dollars, rounded half-even, as the core keeps money:
    doing the same keeps the fold's totals equal to the core's, not merely close."""
    return round(usd * NANO)


def known_dollars(dollars: float, unpriced: int | bool) -> float | None:
    """Dollars as the JSON of every view says them: ``None`` when some codon
    used a model without a price and nothing priced was spent (the money is
    unknown, never ``0``); else the dollars (a lower bound when ``unpriced``)."""
    return None if unpriced and not dollars else dollars


def format_cost(usd: float | None) -> str:
    """Dollars with four decimals (``$0.0320``); ``-`` when unknown."""
    return "-" if usd is None else f"${usd:.4f}"


def known(nano_dollars: int, unpriced: bool) -> str:
    """Dollars as they are known: ``unpriced`` when the model has no price
    (never ``$0``), ``≥ $X`` when part of them is unpriced."""
    if unpriced:
        return "unpriced" if nano_dollars == 0 else f"≥ {format_cost(nano_dollars / NANO)}"
    return format_cost(nano_dollars / NANO)


def known_cost(usd: float | None, unpriced: int | bool) -> str:
    """Dollars of a JSON figure as they are known (:func:`known`): ``None``
    (JSON's ``null``) or ``0`` with ``unpriced`` is ``unpriced``."""
    return known(0 if usd is None else nanos(usd), bool(unpriced))


def total_cost(usd: float | None, unpriced: int, spent: float | None = None) -> str:
    """A total of several codons as every view says it: :func:`known_cost`,
    with how many codons have no price when part of it is priced (``≥ $0.0320
    (2 codons unpriced)``), then the money skipped attempts spent when the
    seed's total leaves it out (``, spent $0.0400``)."""
    text = known_cost(usd, unpriced)
    if unpriced and text != "unpriced":
        text += f" ({unpriced} codon{'s' * (unpriced > 1)} unpriced)"
    if spent is not None and nanos(spent) > nanos(usd or 0.0):  # None: unpriced
        text += f", spent {format_cost(spent)}"
    return text


__all__ = ["NANO", "format_cost", "known", "known_cost", "known_dollars", "nanos", "total_cost"]
