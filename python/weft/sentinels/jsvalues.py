"""JavaScript values and their standard methods, for the template evaluator.

A template sees JSON values as Python ones: objects are ``dict``, arrays
``list``, strings ``str``, numbers ``int``/``float``, ``true``/``false``
``bool``, ``null`` ``None``, and JavaScript's ``undefined`` is
:data:`UNDEFINED`. Functions (arrows and the built-ins) are
:class:`JsFunction`. This module gives those values JavaScript's behaviour
where prompts can tell the difference: how numbers print (``1`` not ``1.0``),
``JSON.stringify``'s layout, truthiness, ``+`` on strings, strict equality,
and the string, array and number methods prompt templates call.

Only these methods exist: a member lookup on a dict reads its own keys,
never a Python attribute, so a template cannot reach anything but the data
it was given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Final

from weft.errors import WeftError

__all__ = [
    "UNDEFINED",
    "JsFunction",
    "TemplateError",
    "get_member",
    "js_equal",
    "js_loose_equal",
    "js_number",
    "js_string",
    "json_stringify",
    "truthy",
    "type_of",
]


class TemplateError(WeftError):
    """A template cannot be parsed or evaluated; the message says where."""


class _Undefined:
    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED: Final = _Undefined()


class JsFunction:
    """A callable value: an arrow function of the template or a built-in."""

    __slots__ = ("call", "name")

    def __init__(self, name: str, call: Callable[[list[Any]], Any]) -> None:
        self.name = name
        self.call = call


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def truthy(v: Any) -> bool:
    """JavaScript's ToBoolean."""
    if v is None or v is UNDEFINED or v is False:
        return False
    if isinstance(v, str):
        return v != ""
    if _is_number(v):
        return v != 0 and not (isinstance(v, float) and math.isnan(v))
    return True


def type_of(v: Any) -> str:
    """``typeof v``."""
    if v is UNDEFINED:
        return "undefined"
    if isinstance(v, bool):
        return "boolean"
    if _is_number(v):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, JsFunction):
        return "function"
    return "object"


def number_text(n: float) -> str:
    """How JavaScript prints a number (``1``, ``0.1``, ``1e+21``, ``NaN``)."""
    if isinstance(n, int):
        return str(n)
    if math.isnan(n):
        return "NaN"
    if math.isinf(n):
        return "Infinity" if n > 0 else "-Infinity"
    if n == int(n) and abs(n) < 1e21:
        return str(int(n))
    text = repr(n)
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        text = f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"
    return text


def js_string(v: Any) -> str:
    """JavaScript's ToString (what ``${v}``, ``String(v)`` and ``+`` give)."""
    if isinstance(v, str):
        return v
    if v is None:
        return "null"
    if v is UNDEFINED:
        return "undefined"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if _is_number(v):
        return number_text(v)
    if isinstance(v, list):
        return ",".join("" if i is None or i is UNDEFINED else js_string(i) for i in v)
    if isinstance(v, JsFunction):
        return f"function {v.name}() {{ [native code] }}"
    return "[object Object]"


def js_number(v: Any) -> float | int:
    """JavaScript's ToNumber."""
    if _is_number(v):
        return v  # type: ignore[no-any-return]
    if v is True:
        return 1
    if v is False or v is None:
        return 0
    if isinstance(v, str):
        text = v.strip()
        if not text:
            return 0
        try:
            return int(text) if text.lstrip("-").isdigit() else float(text)
        except ValueError:
            return math.nan
    if isinstance(v, list) and len(v) <= 1:
        return js_number(v[0]) if v else 0
    return math.nan


def js_equal(a: Any, b: Any) -> bool:
    """``a === b``."""
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if isinstance(a, str | bool) or a is None or a is UNDEFINED:
        return bool(a == b)
    return a is b


def js_loose_equal(a: Any, b: Any) -> bool:
    """``a == b`` (the coercions that apply to JSON values)."""
    nullish = (None, UNDEFINED)
    if a in nullish or b in nullish:
        return a in nullish and b in nullish
    if type_of(a) == type_of(b):
        return js_equal(a, b)
    if isinstance(a, list | dict) or isinstance(b, list | dict):
        return False
    return bool(js_number(a) == js_number(b))


def _to_json_value(v: Any) -> Any:
    if isinstance(v, dict):
        return {
            str(k): _to_json_value(x)
            for k, x in v.items()
            if x is not UNDEFINED and not isinstance(x, JsFunction)
        }
    if isinstance(v, list | tuple):
        return [
            None if x is UNDEFINED or isinstance(x, JsFunction) else _to_json_value(x) for x in v
        ]
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, float) and v == int(v) and abs(v) < 1e21:
        return int(v)
    return v


def json_stringify(v: Any, indent: Any = None) -> Any:
    """``JSON.stringify(v, null, indent)``: ``undefined`` for undefined or a
    function, otherwise the text with JavaScript's layout."""
    if v is UNDEFINED or isinstance(v, JsFunction):
        return UNDEFINED
    width: int | str | None = None
    if _is_number(indent):
        width = max(0, min(10, int(indent))) or None
    elif isinstance(indent, str) and indent:
        width = indent[:10]
    value = _to_json_value(v)
    if width is None:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value, ensure_ascii=False, indent=width, separators=(",", ": "))


# --------------------------------------------------------------------------- methods


def _arg(args: Sequence[Any], i: int) -> Any:
    return args[i] if i < len(args) else UNDEFINED


def _int_arg(args: Sequence[Any], i: int, default: int) -> int:
    v = _arg(args, i)
    if v is UNDEFINED:
        return default
    n = js_number(v)
    if isinstance(n, float):
        if math.isnan(n):
            return 0
        if math.isinf(n):
            return 2**31 if n > 0 else -(2**31)
    return int(n)


def _slice_bounds(length: int, args: Sequence[Any]) -> tuple[int, int]:
    start = _int_arg(args, 0, 0)
    end = _int_arg(args, 1, length)
    if start < 0:
        start = max(0, length + start)
    if end < 0:
        end = max(0, length + end)
    return min(start, length), min(end, length)


def _substring(s: str, args: Sequence[Any]) -> str:
    start = max(0, min(_int_arg(args, 0, 0), len(s)))
    end = max(0, min(_int_arg(args, 1, len(s)), len(s)))
    if start > end:
        start, end = end, start
    return s[start:end]


def _call(fn: Any, args: list[Any]) -> Any:
    if not isinstance(fn, JsFunction):
        raise TemplateError(f"{js_string(fn)} is not a function")
    return fn.call(args)


def _fixed(n: Any, args: Sequence[Any]) -> str:
    digits = max(0, min(100, _int_arg(args, 0, 0)))
    value = js_number(n)
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return number_text(value)
    return f"{value:.{digits}f}"


def _split(s: str, args: Sequence[Any]) -> list[Any]:
    sep = _arg(args, 0)
    if sep is UNDEFINED:
        return [s]
    sep = js_string(sep)
    return list(s) if sep == "" else list(s.split(sep))


def _string_method(s: str, name: str) -> Any:
    methods: dict[str, Callable[[list[Any]], Any]] = {
        "substring": lambda a: _substring(s, a),
        "substr": lambda a: s[_slice_bounds(len(s), a)[0] :][: _int_arg(a, 1, len(s))],
        "slice": lambda a: s[slice(*_slice_bounds(len(s), a))],
        "toUpperCase": lambda a: s.upper(),
        "toLowerCase": lambda a: s.lower(),
        "trim": lambda a: s.strip(),
        "trimStart": lambda a: s.lstrip(),
        "trimEnd": lambda a: s.rstrip(),
        "includes": lambda a: js_string(_arg(a, 0)) in s,
        "startsWith": lambda a: s.startswith(js_string(_arg(a, 0))),
        "endsWith": lambda a: s.endswith(js_string(_arg(a, 0))),
        "indexOf": lambda a: s.find(js_string(_arg(a, 0))),
        "split": lambda a: _split(s, a),
        "replace": lambda a: s.replace(js_string(_arg(a, 0)), js_string(_arg(a, 1)), 1),
        "replaceAll": lambda a: s.replace(js_string(_arg(a, 0)), js_string(_arg(a, 1))),
        "padStart": lambda a: (
            s.rjust(_int_arg(a, 0, 0), (js_string(_arg(a, 1)) or " ")[0])
            if _arg(a, 1) is UNDEFINED or js_string(_arg(a, 1))
            else s
        ),
        "padEnd": lambda a: (
            s.ljust(_int_arg(a, 0, 0), (js_string(_arg(a, 1)) or " ")[0])
            if _arg(a, 1) is UNDEFINED or js_string(_arg(a, 1))
            else s
        ),
        "repeat": lambda a: s * max(0, min(_int_arg(a, 0, 0), 100_000)),
        "charAt": lambda a: s[i] if 0 <= (i := _int_arg(a, 0, 0)) < len(s) else "",
        "at": lambda a: s[i] if -len(s) <= (i := _int_arg(a, 0, 0)) < len(s) else UNDEFINED,
        "concat": lambda a: s + "".join(js_string(x) for x in a),
        "toString": lambda a: s,
    }
    fn = methods.get(name)
    return UNDEFINED if fn is None else JsFunction(name, fn)


def _reduce(items: list[Any], args: list[Any]) -> Any:
    fn = _arg(args, 0)
    if len(args) > 1:
        acc, rest = args[1], items
    elif items:
        acc, rest = items[0], items[1:]
    else:
        raise TemplateError("reduce of an empty array with no initial value")
    for i, item in enumerate(rest):
        acc = _call(fn, [acc, item, i, items])
    return acc


def _array_method(items: list[Any], name: str) -> Any:
    def each(fn: Any) -> list[Any]:
        return [_call(fn, [x, i, items]) for i, x in enumerate(items)]

    def find(fn: Any) -> Any:
        for i, x in enumerate(items):
            if truthy(_call(fn, [x, i, items])):
                return x
        return UNDEFINED

    methods: dict[str, Callable[[list[Any]], Any]] = {
        "map": lambda a: each(_arg(a, 0)),
        "filter": lambda a: [
            x for x, keep in zip(items, each(_arg(a, 0)), strict=True) if truthy(keep)
        ],
        "forEach": lambda a: (each(_arg(a, 0)), UNDEFINED)[1],
        "find": lambda a: find(_arg(a, 0)),
        "some": lambda a: any(truthy(r) for r in each(_arg(a, 0))),
        "every": lambda a: all(truthy(r) for r in each(_arg(a, 0))),
        "reduce": lambda a: _reduce(items, a),
        "slice": lambda a: items[slice(*_slice_bounds(len(items), a))],
        "join": lambda a: ("," if _arg(a, 0) is UNDEFINED else js_string(_arg(a, 0))).join(
            "" if x is None or x is UNDEFINED else js_string(x) for x in items
        ),
        "includes": lambda a: any(js_equal(x, _arg(a, 0)) for x in items),
        "indexOf": lambda a: next((i for i, x in enumerate(items) if js_equal(x, _arg(a, 0))), -1),
        "concat": lambda a: items + [y for x in a for y in (x if isinstance(x, list) else [x])],
        "at": lambda a: (
            items[i] if -len(items) <= (i := _int_arg(a, 0, 0)) < len(items) else UNDEFINED
        ),
        "toString": lambda a: js_string(items),
        "flat": lambda a: [y for x in items for y in (x if isinstance(x, list) else [x])],
    }
    fn = methods.get(name)
    return UNDEFINED if fn is None else JsFunction(name, fn)


def get_member(obj: Any, name: Any) -> Any:
    """``obj[name]``; reading from null or undefined is an error (as in JS)."""
    if obj is None or obj is UNDEFINED:
        raise TemplateError(
            f"cannot read properties of {js_string(obj)} (reading '{js_string(name)}')"
        )
    if isinstance(obj, dict):
        return obj.get(js_string(name), UNDEFINED)
    if isinstance(obj, list | str):
        if _is_number(name) or (isinstance(name, str) and name.isdigit()):
            i = int(js_number(name))
            return obj[i] if 0 <= i < len(obj) and i == js_number(name) else UNDEFINED
        if name == "length":
            return len(obj)
        if isinstance(obj, str):
            return _string_method(obj, js_string(name))
        return _array_method(obj, js_string(name))
    if _is_number(obj):
        if name == "toFixed":
            return JsFunction("toFixed", lambda a: _fixed(obj, a))
        if name == "toString":
            return JsFunction("toString", lambda a: number_text(obj))
    return UNDEFINED
