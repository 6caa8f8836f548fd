"""Trigger conditions, compiled once into predicates on an event's data.

A condition is ``{path, operator, value}``: ``path`` is dotted into the
event's data (``toolInput.command``; a numeric part indexes a list:
``modelUsage.0``), ``operator`` one of the eight below. Configs are written
for the reference runtime, a JavaScript program, so the comparisons follow
JavaScript's strict ones rather than Python's:

* ``equals`` / ``notEquals``: ``===`` / ``!==``, so ``1`` never equals
  ``true`` and ``"1"`` never equals ``1`` (Python's ``==`` would say both);
* ``in`` / ``notIn``: the field is (not) strictly equal to one of the values;
* ``contains``: a string field holds the value as a substring, or a list field
  holds an element strictly equal to it;
* ``matches``: the value is a regular expression (JavaScript syntax) found in
  a string (or number) field, matched in time linear in the field's length
  (:mod:`weft.sentinels.jsregex`: the agent writes that text);
* ``greaterThan`` / ``lessThan``: both are numbers (booleans are not).

A path that does not exist is JavaScript's ``undefined``: it equals nothing,
so ``notEquals`` and ``notIn`` hold and every other operator fails.

Compiling turns each condition into a closure over its parsed path, its
value and its compiled regular expression, so matching an event does no
parsing: this is the inner loop of the trigger engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from weft.config.schema import Condition
from weft.sentinels.jsregex import compile_js_pattern

__all__ = ["MISSING", "Predicate", "compile_condition", "compile_conditions", "lookup"]

Predicate = Callable[[Mapping[str, Any]], bool]
"""A compiled condition (or conjunction of conditions) on an event's data."""


class _Missing:
    """JavaScript's ``undefined``: what a path that does not exist yields."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def lookup(data: Any, parts: Sequence[str]) -> Any:
    """The value at ``parts`` inside ``data``, or :data:`MISSING`."""
    value = data
    for part in parts:
        if isinstance(value, Mapping):
            value = value.get(part, MISSING)
            if value is MISSING:
                return MISSING
        elif isinstance(value, list) and part.isdigit():
            index = int(part)
            if index >= len(value):
                return MISSING
            value = value[index]
        else:
            return MISSING
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def strict_equals(a: Any, b: Any) -> bool:
    """JavaScript's ``===`` on JSON values (scalars; containers never match)."""
    if a is MISSING or b is MISSING:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is None and b is None


def compile_condition(condition: Condition) -> Predicate:
    """The predicate of one condition."""
    parts = tuple(condition.path.split("."))
    op, value = condition.operator, condition.value
    if len(parts) == 1:
        fast = _single_key(parts[0], op, value)
        if fast is not None:
            return fast
        key = parts[0]

        def get(data: Mapping[str, Any]) -> Any:
            return data.get(key, MISSING)
    else:

        def get(data: Mapping[str, Any]) -> Any:
            return lookup(data, parts)

    return _OPERATORS[op](get, value)


def _single_key(key: str, op: str, value: Any) -> Predicate | None:
    """The common conditions on a top-level field, as one expression each
    (no nested call): the trigger engine evaluates them for every event."""
    if op == "equals" and isinstance(value, str):
        return lambda d: type(v := d.get(key)) is str and v == value
    if op == "equals" and isinstance(value, bool):
        return lambda d: d.get(key) is value
    if op in ("greaterThan", "lessThan") and _is_number(value):
        if op == "greaterThan":
            return lambda d: type(v := d.get(key)) in _NUMBER_TYPES and v > value
        return lambda d: type(v := d.get(key)) in _NUMBER_TYPES and v < value
    if op in ("in", "notIn") and isinstance(value, list) and all(isinstance(v, str) for v in value):
        strings = frozenset(value)
        if op == "in":
            return lambda d: type(v := d.get(key)) is str and v in strings
        return lambda d: not (type(v := d.get(key)) is str and v in strings)
    if op == "contains" and isinstance(value, str):

        def contains(d: Mapping[str, Any]) -> bool:
            v = d.get(key)
            if type(v) is str:
                return value in v
            return isinstance(v, list) and any(type(i) is str and i == value for i in v)

        return contains
    return None


_NUMBER_TYPES: Final = (int, float)
"""``type(v) in`` this is a number and not a bool (``type(True)`` is bool)."""


def _equals(get: Callable[[Any], Any], value: Any) -> Predicate:
    if isinstance(value, str):  # the common case, without the general comparison
        return lambda data: (v := get(data)) == value and isinstance(v, str)
    return lambda data: strict_equals(get(data), value)


def _not_equals(get: Callable[[Any], Any], value: Any) -> Predicate:
    test = _equals(get, value)
    return lambda data: not test(data)


def _in(get: Callable[[Any], Any], value: Any) -> Predicate:
    values = tuple(value) if isinstance(value, list) else (value,)
    strings = frozenset(v for v in values if isinstance(v, str))
    others = tuple(v for v in values if not isinstance(v, str))

    def test(data: Mapping[str, Any]) -> bool:
        v = get(data)
        if isinstance(v, str):
            return v in strings
        return any(strict_equals(v, o) for o in others)

    return test


def _not_in(get: Callable[[Any], Any], value: Any) -> Predicate:
    test = _in(get, value)
    return lambda data: not test(data)


def _contains(get: Callable[[Any], Any], value: Any) -> Predicate:
    def test(data: Mapping[str, Any]) -> bool:
        v = get(data)
        if isinstance(v, str):
            return isinstance(value, str) and value in v
        if isinstance(v, list):
            return any(strict_equals(item, value) for item in v)
        return False

    return test


def _matches(get: Callable[[Any], Any], value: Any) -> Predicate:
    # Raises PatternError for a pattern `weft validate` refuses.
    search = compile_js_pattern(str(value)).search

    def test(data: Mapping[str, Any]) -> bool:
        v = get(data)
        if isinstance(v, str):
            return search(v)
        if _is_number(v):
            return search(repr(v) if isinstance(v, float) else str(v))
        return False

    return test


def _greater(get: Callable[[Any], Any], value: Any) -> Predicate:
    if not _is_number(value):
        return lambda data: False
    return lambda data: _is_number(v := get(data)) and v > value


def _less(get: Callable[[Any], Any], value: Any) -> Predicate:
    if not _is_number(value):
        return lambda data: False
    return lambda data: _is_number(v := get(data)) and v < value


_OPERATORS: Final[dict[str, Callable[[Callable[[Any], Any], Any], Predicate]]] = {
    "equals": _equals,
    "notEquals": _not_equals,
    "in": _in,
    "notIn": _not_in,
    "contains": _contains,
    "matches": _matches,
    "greaterThan": _greater,
    "lessThan": _less,
}


def compile_conditions(conditions: Sequence[Condition]) -> Predicate | None:
    """The conjunction of ``conditions``; ``None`` when there are none (the
    caller then skips the call altogether)."""
    tests = tuple(compile_condition(c) for c in conditions)
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        first, second = tests
        return lambda data: first(data) and second(data)
    return lambda data: all(t(data) for t in tests)


def inline_condition(
    condition: Condition,
    name: str,
    namespace: dict[str, Any],
    fetched: Mapping[str, str] | None = None,
) -> str:
    """A Python expression on ``data`` equal to :func:`compile_condition`'s
    predicate, for the trigger engine's generated routing code.

    ``fetched`` maps a top-level field to the local name that already holds
    ``data.get(field)`` (a field several routes test is read once per event).

    The condition's values never enter the source: they are bound in
    ``namespace`` under names made from ``name`` (an identifier the caller
    chose), and the source holds only those names and fixed text. The common
    single-key operators become one expression; the rest call the compiled
    predicate.
    """
    parts = condition.path.split(".")
    op, value = condition.operator, condition.value
    key, val = f"{name}_k", f"{name}_v"
    if len(parts) == 1:
        namespace[key] = parts[0]
        get = (fetched or {}).get(parts[0]) or f"data.get({key})"
        if op == "equals" and isinstance(value, str):
            namespace[val] = value
            return f"(type(_v := {get}) is str and _v == {val})"
        if op == "equals" and isinstance(value, bool):
            namespace[val] = value
            return f"({get} is {val})"
        if op in ("greaterThan", "lessThan") and _is_number(value):
            namespace[val] = value
            cmp = ">" if op == "greaterThan" else "<"
            return f"(type(_v := {get}) in _NUMBER_TYPES and _v {cmp} {val})"
        if (
            op in ("in", "notIn")
            and isinstance(value, list)
            and all(isinstance(v, str) for v in value)
        ):
            namespace[val] = frozenset(value)
            test = f"(type(_v := {get}) is str and _v in {val})"
            return test if op == "in" else f"(not {test})"
        if op == "contains" and isinstance(value, str):
            # A string field inline; a list field (rare) through the predicate.
            namespace[val], namespace[name] = value, compile_condition(condition)
            return (
                f"({val} in _v if type(_v := {get}) is str else type(_v) is list and {name}(data))"
            )
    namespace[name] = compile_condition(condition)
    return f"{name}(data)"
