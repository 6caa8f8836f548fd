"""What a Claude result line cost (reference agent-cli-protocols §1.5): from
the CLI's own figures when it gives them, else priced with Weft's table.
"""

from __future__ import annotations

import datetime as dt

import msgspec

from weft.agents import pricing
from weft.agents.claude_wire import Result
from weft.agents.events import CostSource, ModelUsage, Tokens


def result_cost(
    r: Result,
    *,
    model: str | None,
    fallback_model: str | None,
    table: pricing.PricingTable,
    at: dt.date,
) -> tuple[float | None, CostSource, Tokens, dict[str, ModelUsage]]:
    """The cost, its source, the tokens and the per-model usage of a result
    line (the order of sources is in :mod:`weft.agents.claude_parser`).
    ``model`` is the session's main model; ``fallback_model`` prices bare
    ``usage`` when the session named none."""
    main = r.usage.tokens() if r.usage is not None else None
    per_model: dict[str, ModelUsage] = {}
    computed_nanos: int | None = 0
    own = r.model_usage_since_last_result
    usage_by_model = own if own is not None else r.modelUsage
    all_reported = bool(usage_by_model)
    reported_sum = 0.0
    total = Tokens()
    for name, mu in usage_by_model.items():
        tokens = Tokens(
            input=mu.inputTokens,
            output=mu.outputTokens,
            cache_creation=mu.cacheCreationInputTokens,
            cache_read=mu.cacheReadInputTokens,
        )
        if main is not None and name == model and main.cache_creation_1h:
            # modelUsage has no lifetime split; the main model's is in usage.
            split = min(main.cache_creation_1h, tokens.cache_creation)
            tokens = msgspec.structs.replace(tokens, cache_creation_1h=split)
        total = total + tokens
        if mu.costUSD is not None:
            reported_sum += mu.costUSD
            nanos: int | None = round(mu.costUSD * 1e9)
            cost: float | None = pricing.round_usd(mu.costUSD)
        else:
            all_reported = False
            nanos = table.cost_nanos(name, tokens, at)
            cost = None if nanos is None else nanos / 1e9
        if computed_nanos is not None:
            computed_nanos = None if nanos is None else computed_nanos + nanos
        per_model[name] = ModelUsage(tokens=tokens, cost_usd=cost)
    if main is not None:
        total = field_max(total, main)
    if own is not None:
        # The per-process share: total_cost_usd is the session's running total.
        if not own:
            return 0.0, CostSource.REPORTED, total, per_model
        if all_reported:
            return pricing.round_usd(reported_sum), CostSource.REPORTED, total, per_model
    reported = r.total_cost_usd if r.total_cost_usd is not None else r.cost_usd
    if reported is not None and own is None:
        return pricing.round_usd(reported), CostSource.REPORTED, total, per_model
    if per_model:
        if all_reported:
            return pricing.round_usd(reported_sum), CostSource.MODEL_USAGE, total, per_model
        if computed_nanos is not None:
            return computed_nanos / 1e9, CostSource.COMPUTED, total, per_model
        return None, CostSource.UNPRICED, total, per_model
    if main is None or main.total == 0:
        return 0.0, CostSource.COMPUTED, total, per_model
    model = model or fallback_model
    nanos = table.cost_nanos(model, main, at) if model else None
    if nanos is None:
        return None, CostSource.UNPRICED, total, per_model
    return nanos / 1e9, CostSource.COMPUTED, total, per_model


def field_max(a: Tokens, b: Tokens) -> Tokens:
    """Field by field, the larger of two token counts."""
    return Tokens(
        input=max(a.input, b.input),
        output=max(a.output, b.output),
        cache_creation=max(a.cache_creation, b.cache_creation),
        cache_read=max(a.cache_read, b.cache_read),
        cache_creation_1h=max(a.cache_creation_1h, b.cache_creation_1h),
    )
