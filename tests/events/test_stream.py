"""weft.events.stream: the rule that makes a journaled usage unpriced."""

from __future__ import annotations

from weft.events.stream import TokenUsageEvent, unpriced_usage
from weft.state import encode_stream


def _usage(cost: float | None, **tokens: int) -> str:
    counts = {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_tokens": 0,
        "cache_read_tokens": 0,
        **tokens,
    }
    return encode_stream(TokenUsageEvent(codon_id="a", total_cost=cost, **counts)).decode()


def test_a_usage_is_unpriced_when_it_has_tokens_and_no_cost() -> None:
    for field in ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens"):
        assert unpriced_usage(_usage(None, **{field: 3})), field
    assert not unpriced_usage(_usage(None))  # no tokens: nothing was spent
    assert not unpriced_usage(_usage(0.0, input_tokens=3))  # priced, even at $0
    assert not unpriced_usage(_usage(0.25, output_tokens=3))


def test_a_payload_that_is_not_a_usage_is_never_unpriced() -> None:
    assert not unpriced_usage('{"type":"info","data":{"totalCost":null}}')
    assert not unpriced_usage("not json")
