"""The structural walk, compiled from the Structs' type information."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from weft.config.schema import Hank, SentinelConfig
from weft.config.walk import Sink, check_value, describe_value


class Inner(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    n: Annotated[int, Meta(ge=0)]


class Sample(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    either: str | list[str] | None = None
    choice: Literal["zeta", "alpha"] = "zeta"
    inner: Inner | None = None
    amount: Annotated[float, Meta(gt=0)] = 1.0
    table: dict[str, Inner] = msgspec.field(default_factory=dict)


def run(value: Any, t: Any = Sample) -> list[tuple[str, str, str]]:
    sink = Sink("f.json", value)
    check_value(value, t, (), sink)
    return [(p.code, p.path, p.message) for p in sink.in_order()]


def test_a_matching_value_has_no_problems() -> None:
    assert run({"either": ["a"], "choice": "alpha", "inner": {"n": 0}, "amount": 2}) == []
    assert run({"either": "a", "table": {"x": {"n": 1}}}) == []


def test_unions_pick_the_member_by_json_kind() -> None:
    assert run({"either": 3}) == [
        ("wrong_type", "either", "expected a string or an array of strings, got 3")
    ]
    assert run({"either": ["a", 2]}) == [("wrong_type", "either[1]", "expected a string, got 2")]


def test_literals_are_listed_in_declared_order() -> None:
    assert run({"choice": "beta"}) == [
        ("bad_value", "choice", 'expected "zeta" or "alpha", got "beta"')
    ]


def test_numbers_booleans_and_bounds() -> None:
    assert run({"amount": True}) == [("wrong_type", "amount", "expected a number, got true")]
    assert run({"amount": 0}) == [("bad_value", "amount", "must be greater than 0, got 0")]
    assert run({"inner": {"n": 1.0}}) == [("wrong_type", "inner.n", "expected an integer, got 1.0")]
    assert run({"table": {"k": {"n": -1}}}) == [
        ("bad_value", "table.k.n", "must be at least 0, got -1")
    ]


def test_nested_unknown_and_missing_keys_are_all_reported() -> None:
    found = run({"inner": {"m": 1}, "extra": 1})
    assert [(c, p) for c, p, _ in found] == [
        ("unknown_key", "inner.m"),
        ("missing_key", "inner.n"),
        ("unknown_key", "extra"),
    ]


def test_null_is_refused_for_optional_fields() -> None:
    assert run({"inner": None}) == [("wrong_type", "inner", "expected an object (Inner), got null")]


def test_tagged_unions_dispatch_on_the_tag() -> None:
    base = {
        "id": "s",
        "name": "S",
        "model": "a/b",
        "trigger": {"type": "event", "on": ["*"]},
        "userPromptText": "x",
    }
    assert run({**base, "execution": {"strategy": "count", "threshold": 5}}, SentinelConfig) == []
    assert run({**base, "execution": {"threshold": 5}}, SentinelConfig)[0][:2] == (
        "missing_key",
        "execution.strategy",
    )
    assert run({**base, "execution": {"strategy": "count"}}, SentinelConfig) == [
        ("missing_key", "execution.threshold", 'missing required key "threshold"')
    ]
    assert run({**base, "execution": "immediate"}, SentinelConfig)[0][:2] == (
        "wrong_type",
        "execution",
    )


def test_a_codon_without_type_is_a_codon() -> None:
    codon = {"id": "a", "name": "A", "model": "m", "continuationMode": "fresh"}
    assert run({"hank": [codon]}, Hank) == []
    assert run({"hank": [{**codon, "type": "codon"}]}, Hank) == []


def test_describe_value() -> None:
    assert describe_value("x" * 50) == '"' + "x" * 37 + '..."'
    assert [describe_value(v) for v in (None, True, False, 1.5, [], [1], {})] == [
        "null",
        "true",
        "false",
        "1.5",
        "an empty array",
        "an array",
        "an object",
    ]
