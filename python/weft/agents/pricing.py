"""Model prices and the token cost formula (reference agent-cli-protocols §5).

The table is data: ``pricing.toml`` beside this module, one row per model-id
prefix and effective date (its header explains the format). The formula, per
model, with ``in`` that model's input price::

    cost = input * in + cache_write_5m * w5 + cache_write_1h * w1
         + cache_read * r + output * out            (prices per million tokens)

where cache writes without a reported lifetime split count as 5-minute
writes. Prices become integer pico-dollars per token when the table loads,
so the sum is exact; it is rounded once, half to even, to whole nano-dollars
(1e-9 USD), the unit of Weft's core (``rust_core/src/state/money.rs``).

Costs are a fallback and a cross-check: an agent's own reported cost always
wins (the adapters decide). A model the table does not know is *unpriced*
(``None``), never $0. Aliases (``sonnet``) are not priced: callers pass the
model id the agent reported.
"""

from __future__ import annotations

import datetime as dt
import functools
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeAlias, cast

from weft.agents.events import Tokens
from weft.errors import WeftError

PICO_PER_NANO = 1000
_PICO_PER_USD_PER_MTOK = Decimal(1_000_000)  # $1/MTok = 1e-6 $/token = 1e6 pico$/token
_PRICE_KEYS = ("input", "cache_write_5m", "cache_write_1h", "cache_read", "output")
_ROW_KEYS = frozenset({"prefix", "effective_from", "source", "verified", "tier", *_PRICE_KEYS})
_TIER_KEYS = frozenset({"above_prompt_tokens", *_PRICE_KEYS})


class PricingError(WeftError):
    """The price table cannot be read; the message names the file, the row
    and the field."""


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices of one model in pico-dollars (1e-12 USD) per token."""

    input: int
    cache_write_5m: int
    cache_write_1h: int
    cache_read: int
    output: int

    def cost_pico(self, tokens: Tokens) -> int:
        """The exact cost of ``tokens`` in pico-dollars."""
        written = tokens.cache_creation
        one_hour = tokens.cache_creation_1h
        if one_hour:  # clamp a split that does not add up
            one_hour = min(max(one_hour, 0), written)
        return (
            tokens.input * self.input
            + (written - one_hour) * self.cache_write_5m
            + one_hour * self.cache_write_1h
            + tokens.cache_read * self.cache_read
            + tokens.output * self.output
        )


@dataclass(frozen=True, slots=True)
class Tier:
    """Prices for a single request whose prompt exceeds ``above_prompt_tokens``."""

    above_prompt_tokens: int
    prices: Prices


@dataclass(frozen=True, slots=True)
class PriceRow:
    """One row of the table."""

    prefix: str
    effective_from: dt.date
    prices: Prices
    tiers: tuple[Tier, ...]
    """Ascending by threshold."""
    source: str
    verified: bool

    def prices_for(self, tokens: Tokens, per_request: bool) -> Prices:
        """The prices that apply to ``tokens`` (tiers only for one request)."""
        if per_request and self.tiers:
            prompt = tokens.input + tokens.cache_creation + tokens.cache_read
            for tier in reversed(self.tiers):
                if prompt > tier.above_prompt_tokens:
                    return tier.prices
        return self.prices


def normalize_model(model: str) -> str:
    """The id prefixes are matched against: lower case, without a provider
    (``anthropic/``), Bedrock region and vendor (``us.anthropic.``), a
    Vertex ``@`` (``claude-opus-4-5@20251101``) or a context suffix
    (``[1m]``)."""
    m = model.strip().lower()
    m = m.rpartition("/")[2]
    if "anthropic." in m:
        m = m.split("anthropic.", 1)[1]
    m = m.replace("@", "-")
    bracket = m.find("[")
    if bracket > 0:
        m = m[:bracket]
    return m


def round_pico(pico: int) -> int:
    """Pico-dollars to nano-dollars, half to even (like the core's Money)."""
    nanos, rest = divmod(pico, PICO_PER_NANO)
    half = PICO_PER_NANO // 2
    if rest > half or (rest == half and nanos % 2 == 1):
        nanos += 1
    return nanos


def round_usd(usd: float) -> float:
    """A dollar amount rounded to whole nano-dollars, half to even."""
    return round(usd * 1e9) / 1e9


_UNKNOWN = object()


class PricingTable:
    """The rows of a price table, looked up by model id and date."""

    def __init__(self, rows: list[PriceRow], origin: str = "<table>") -> None:
        self.origin = origin
        self._rows: dict[str, list[PriceRow]] = {}
        for row in rows:
            self._rows.setdefault(row.prefix, []).append(row)
        for prefix, same in self._rows.items():
            same.sort(key=lambda r: r.effective_from)
            dates = [r.effective_from for r in same]
            if len(set(dates)) != len(dates):
                raise PricingError(
                    f"{origin}: two rows for prefix {prefix!r} share an effective_from date; "
                    "give each price change its own date"
                )
        self._cache: dict[tuple[str, dt.date], PriceRow | None] = {}

    @classmethod
    def load(cls, path: Path) -> PricingTable:
        """Read a table from a TOML file."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise PricingError(f"cannot read the price table {path}: {e.strerror}") from e
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, origin: str = "<table>") -> PricingTable:
        """Read a table from TOML text (``origin`` names it in errors)."""
        try:
            data = tomllib.loads(text, parse_float=Decimal)
        except tomllib.TOMLDecodeError as e:
            raise PricingError(f"{origin}: not valid TOML: {e}") from e
        models = data.get("model")
        if not isinstance(models, list) or not models:
            raise PricingError(f"{origin}: no [[model]] rows")
        unknown = set(data) - {"model"}
        if unknown:
            raise PricingError(f"{origin}: unknown top-level keys {sorted(unknown)}")
        return cls([_row(i, m, origin) for i, m in enumerate(models)], origin)

    @property
    def rows(self) -> list[PriceRow]:
        """Every row, by prefix then date."""
        return [r for prefix in sorted(self._rows) for r in self._rows[prefix]]

    def lookup(self, model: str, at: dt.date | None = None) -> PriceRow | None:
        """The row that prices ``model`` on ``at`` (default: today, UTC):
        the longest prefix ending at a ``-`` or at the end of the id, then
        the latest row effective on that date (or the earliest row for an
        earlier date). ``None``: unpriced."""
        when = at or dt.datetime.now(dt.UTC).date()
        key = (model, when)
        if key in self._cache:
            return self._cache[key]
        row = None
        candidate = normalize_model(model)
        while candidate:
            same = self._rows.get(candidate)
            if same is not None:
                row = same[0]
                for r in same:
                    if r.effective_from <= when:
                        row = r
                break
            cut = candidate.rfind("-")
            candidate = candidate[:cut] if cut > 0 else ""
        if len(self._cache) < 4096:
            self._cache[key] = row
        return row

    def cost_nanos(
        self, model: str, tokens: Tokens, at: dt.date | None = None, *, per_request: bool = False
    ) -> int | None:
        """The cost of ``tokens`` on ``model`` in nano-dollars, or ``None``
        when the model is unpriced. ``per_request``: the tokens are one API
        request, so long-context tiers apply."""
        # The hot path (a live estimate per API message) skips lookup().
        found = self._cache.get((model, at), _UNKNOWN) if at is not None else _UNKNOWN
        row = self.lookup(model, at) if found is _UNKNOWN else cast("PriceRow | None", found)
        if row is None:
            return None
        prices = row.prices_for(tokens, per_request) if row.tiers else row.prices
        return round_pico(prices.cost_pico(tokens))

    def cost_usd(
        self, model: str, tokens: Tokens, at: dt.date | None = None, *, per_request: bool = False
    ) -> float | None:
        """:meth:`cost_nanos` in US dollars."""
        nanos = self.cost_nanos(model, tokens, at, per_request=per_request)
        return None if nanos is None else nanos / 1e9


def _row(index: int, raw: Any, origin: str) -> PriceRow:
    where = f"{origin}: model row {index + 1}"
    if not isinstance(raw, dict):
        raise PricingError(f"{where}: expected a table")
    prefix = raw.get("prefix")
    if not isinstance(prefix, str) or not prefix.strip():
        raise PricingError(f'{where}: missing prefix (the model-id prefix, e.g. "claude-opus-4")')
    where = f"{where} ({prefix})"
    unknown = set(raw) - _ROW_KEYS
    if unknown:
        raise PricingError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(_ROW_KEYS)}")
    date = raw.get("effective_from")
    if not isinstance(date, dt.date) or isinstance(date, dt.datetime):
        raise PricingError(f"{where}: effective_from must be a TOML date such as 2025-09-29")
    source = raw.get("source")
    if not isinstance(source, str) or not source:
        raise PricingError(f"{where}: missing source (where the prices come from)")
    verified = raw.get("verified")
    if not isinstance(verified, bool):
        raise PricingError(f"{where}: verified must be true or false")
    tiers_raw = raw.get("tier", [])
    if not isinstance(tiers_raw, list):
        raise PricingError(f"{where}: tier must be a list of [[model.tier]] tables")
    tiers = []
    for j, t in enumerate(tiers_raw):
        twhere = f"{where}, tier {j + 1}"
        if not isinstance(t, dict):
            raise PricingError(f"{twhere}: expected a table")
        unknown = set(t) - _TIER_KEYS
        if unknown:
            raise PricingError(f"{twhere}: unknown keys {sorted(unknown)}")
        above = t.get("above_prompt_tokens")
        if not isinstance(above, int) or isinstance(above, bool) or above <= 0:
            raise PricingError(f"{twhere}: above_prompt_tokens must be a positive integer")
        tiers.append(Tier(above, _prices(t, twhere)))
    tiers.sort(key=lambda t: t.above_prompt_tokens)
    return PriceRow(
        prefix=normalize_model(prefix),
        effective_from=date,
        prices=_prices(raw, where),
        tiers=tuple(tiers),
        source=source,
        verified=verified,
    )


def _prices(raw: dict[str, Any], where: str) -> Prices:
    values = []
    for key in _PRICE_KEYS:
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | Decimal):
            raise PricingError(f"{where}: {key} must be a number (USD per million tokens)")
        pico = Decimal(value) * _PICO_PER_USD_PER_MTOK
        if value < 0 or pico != pico.to_integral_value():
            raise PricingError(
                f"{where}: {key} = {value} is negative or has more than six decimals"
            )
        values.append(int(pico))
    return Prices(*values)


@functools.cache
def default_table() -> PricingTable:
    """Weft's own table (``pricing.toml``, shipped with the package)."""
    # Read beside this module, not through importlib.resources: the package is
    # never zipped (it ships a compiled extension), and importlib.resources
    # with zipfile and tempfile cost about 10 ms before weft run's first agent.
    text = Path(__file__).with_name("pricing.toml").read_text(encoding="utf-8")
    return PricingTable.parse(text, "weft/agents/pricing.toml")


def cost_usd(
    model: str, tokens: Tokens, at: dt.date | None = None, *, per_request: bool = False
) -> float | None:
    """The cost of ``tokens`` on ``model`` from Weft's table, in US dollars
    rounded to nano-dollars; ``None`` for an unpriced model. ``at`` is the
    date the tokens were used (default today). ``per_request``: the tokens
    are one API request, so long-context tiers apply."""
    return default_table().cost_usd(model, tokens, at, per_request=per_request)


Pricer: TypeAlias = Callable[[str, Tokens], float | None]
"""Prices tokens of one model in USD; ``None`` for a model it does not know."""


def default_pricer(model: str, tokens: Tokens) -> float | None:
    """Weft's pricing table (:func:`cost_usd`)."""
    return cost_usd(model, tokens)
