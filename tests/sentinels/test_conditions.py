"""The inline form of a condition (the trigger engine's generated code) decides
as its compiled predicate does, whether its field is read in place or was
read once before (a field several sentinels test)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from tests.sentinels.test_triggers import conditions, datas

from weft.config.schema import Condition
from weft.sentinels.conditions import _NUMBER_TYPES, compile_condition, inline_condition


@settings(max_examples=300, deadline=None)
@given(condition=conditions, data=datas)
def test_inline_condition_decides_as_the_predicate(condition: Condition, data: Any) -> None:
    expected = compile_condition(condition)(data)
    for fetched in (None, {condition.path: "h0"}):
        ns: dict[str, Any] = {"_NUMBER_TYPES": _NUMBER_TYPES}
        source = inline_condition(condition, "c0", ns, fetched)
        test = eval(f"lambda data, h0: {source}", ns)
        assert bool(test(data, data.get(condition.path))) == expected, source
