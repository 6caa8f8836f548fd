"""The structural check: a JSON value against a Struct, every problem at once.

msgspec stops at the first problem it meets, and a user fixing a hank file
wants them all. This walk is compiled from msgspec's own type information
(:func:`msgspec.inspect.type_info`) of the Structs in
:mod:`weft.config.schema`, so the checks cannot drift from the schema: a
field added there is checked here and exported in the JSON Schema with no
other change.

A value that passes the walk converts to its Struct with
:func:`msgspec.convert` without error (the fuzz tests hold this).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import inspect as mi

from weft.config.hints import CODON_TYPOS, did_you_mean, quote_list
from weft.config.ids import ID_HINT, ID_PATTERN, SENTINEL_ID_PATTERN, id_problem
from weft.config.problems import ConfigProblem, JsonPath, format_path, item_label

__all__ = ["Sink", "check_value", "describe_value"]

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_PATTERN_HINTS = {
    SENTINEL_ID_PATTERN: "use lowercase letters, digits and hyphens only",
    ID_PATTERN: ID_HINT,
}
# Patterns whose failures are said in words (which character, which rule), not
# as the regular expression.
_PATTERN_EXPLAINED = frozenset({ID_PATTERN, SENTINEL_ID_PATTERN})


class Sink:
    """Collects the problems of one file, labelling each with its codon or loop."""

    def __init__(self, file: str, doc: Any = None, *, hank_document: bool = False) -> None:
        self.file = file
        self.doc = doc
        self.hank_document = hank_document
        self.problems: list[ConfigProblem] = []
        self._order: list[tuple[int, ...]] = []

    def add(
        self,
        path: JsonPath,
        code: str,
        message: str,
        *,
        hint: str | None = None,
        severity: str = "error",
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        """Records a problem at ``path``."""
        item: str | None = None
        where: str | None = None
        if self.hank_document:
            found = item_label(self.doc, path)
            if found is not None:
                item, where = format_path(found[0]), found[1]
        self.problems.append(
            ConfigProblem(
                file=self.file,
                path=format_path(path),
                message=message,
                code=code,
                severity="warning" if severity == "warning" else "error",
                item=item,
                where=where,
                hint=hint,
                line=line,
                column=column,
            )
        )
        self._order.append(self._position(path))

    def extend(self, problems: list[ConfigProblem], at: JsonPath) -> None:
        """Adds problems found elsewhere (another file), placed at ``at`` in this one."""
        position = self._position(at)
        for problem in problems:
            self.problems.append(problem)
            self._order.append(position)

    def _position(self, path: JsonPath) -> tuple[int, ...]:
        """Where ``path`` is in the document, for sorting problems in reading order."""
        key: list[int] = []
        node = self.doc
        for part in path:
            if isinstance(node, dict) and isinstance(part, str):
                key.append(list(node).index(part) if part in node else len(node))
                node = node.get(part)
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                key.append(part)
                node = node[part]
            else:
                key.append(0)
                node = None
        return tuple(key)

    def in_order(self) -> list[ConfigProblem]:
        """The problems in the order of the places they are about (stable)."""
        order = sorted(range(len(self.problems)), key=lambda i: self._order[i])
        return [self.problems[i] for i in order]

    def warn(self, path: JsonPath, code: str, message: str, *, hint: str | None = None) -> None:
        """Records a warning at ``path``."""
        self.add(path, code, message, hint=hint, severity="warning")

    @property
    def error_count(self) -> int:
        """How many errors (not warnings) were recorded."""
        return sum(1 for p in self.problems if p.is_error)


def describe_value(value: Any) -> str:
    """A short rendering of a JSON value for a message: ``"contine"``, ``3``, ``an object``."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return msgspec.json.encode(shown).decode()
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "an empty array" if not value else "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


Checker = Callable[[Any, JsonPath, Sink], None]


def _unwrap(t: mi.Type) -> mi.Type:
    while isinstance(t, mi.Metadata):
        t = t.type
    return t


def _kind_of(t: mi.Type) -> set[type]:
    """The Python types of JSON values that could be of type ``t``."""
    t = _unwrap(t)
    if isinstance(t, mi.StrType | mi.LiteralType):
        return {str}
    if isinstance(t, mi.BoolType):
        return {bool}
    if isinstance(t, mi.IntType):
        return {int}
    if isinstance(t, mi.FloatType):
        return {int, float}
    if isinstance(t, mi.NoneType):
        return {type(None)}
    if isinstance(t, mi.ListType):
        return {list}
    if isinstance(t, mi.DictType | mi.StructType):
        return {dict}
    if isinstance(t, mi.UnionType):
        out: set[type] = set()
        for member in t.types:
            out |= _kind_of(member)
        return out
    return {str, bool, int, float, type(None), list, dict}


def _json_type(value: Any) -> type:
    return type(value)


def _expected(t: mi.Type) -> str:
    """What a value of type ``t`` is, in words."""
    t = _unwrap(t)
    if isinstance(t, mi.StrType):
        return "a non-empty string" if t.min_length else "a string"
    if isinstance(t, mi.LiteralType):
        return quote_list(str(v) for v in t.values)
    if isinstance(t, mi.BoolType):
        return "true or false"
    if isinstance(t, mi.IntType):
        return "an integer"
    if isinstance(t, mi.FloatType):
        return "a number"
    if isinstance(t, mi.NoneType):
        return "null"
    if isinstance(t, mi.ListType):
        return f"an array of {_plural(t.item_type)}"
    if isinstance(t, mi.DictType):
        return "an object"
    if isinstance(t, mi.StructType):
        return f"an object ({t.cls.__name__})"
    if isinstance(t, mi.UnionType):
        members = [m for m in t.types if not isinstance(_unwrap(m), mi.NoneType)]
        if _tagged_members(t):
            return "an object"
        return " or ".join(dict.fromkeys(_expected(m) for m in members))
    return "a JSON value"


def _plural(t: mi.Type) -> str:
    t = _unwrap(t)
    if isinstance(t, mi.StrType):
        return "non-empty strings" if t.min_length else "strings"
    if isinstance(t, mi.StructType):
        return f"objects ({t.cls.__name__})"
    if isinstance(t, mi.UnionType) and _tagged_members(t):
        return "objects"
    return "values"


def _tagged_members(t: mi.UnionType) -> list[mi.StructType] | None:
    structs = [_unwrap(m) for m in t.types if isinstance(_unwrap(m), mi.StructType)]
    typed = [s for s in structs if isinstance(s, mi.StructType)]
    if len(typed) >= 2 and all(s.tag_field == typed[0].tag_field for s in typed):
        return typed
    return None


def _type_error(t: mi.Type, value: Any, path: JsonPath, sink: Sink) -> None:
    sink.add(path, "wrong_type", f"expected {_expected(t)}, got {describe_value(value)}")


class _Compiler:
    """Turns msgspec type information into checker functions, once per type."""

    def __init__(self) -> None:
        self._structs: dict[type, Checker] = {}
        self._literal_order: dict[frozenset[str], tuple[str, ...]] = {}
        self._unread_orders: list[type] = []
        """Structs whose Literal orders are read when a message first needs one:
        reading them evaluates every annotation again (about 5 ms at the first
        load of a hank), and a valid hank never needs them."""

    def compile(self, t: mi.Type) -> Checker:
        """A checker for values of type ``t``."""
        t = _unwrap(t)
        if isinstance(t, mi.AnyType):
            return _accept
        if isinstance(t, mi.StrType):
            return self._str(t)
        if isinstance(t, mi.LiteralType):
            return self._literal(t)
        if isinstance(t, mi.BoolType):
            return self._simple(t, bool)
        if isinstance(t, mi.IntType):
            return self._int(t)
        if isinstance(t, mi.FloatType):
            return self._float(t)
        if isinstance(t, mi.NoneType):
            return self._simple(t, type(None))
        if isinstance(t, mi.ListType):
            return self._list(t)
        if isinstance(t, mi.DictType):
            return self._dict(t)
        if isinstance(t, mi.StructType):
            return self._struct(t)
        if isinstance(t, mi.UnionType):
            return self._union(t)
        raise TypeError(f"hank schema uses a type the walk does not know: {t!r}")

    def _simple(self, t: mi.Type, kind: type) -> Checker:
        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not kind:
                _type_error(t, value, path, sink)

        return check

    def _str(self, t: mi.StrType) -> Checker:
        min_length = t.min_length or 0
        max_length = t.max_length
        pattern = re.compile(t.pattern) if t.pattern else None
        explained = t.pattern if t.pattern in _PATTERN_EXPLAINED else None

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not str:
                _type_error(t, value, path, sink)
            elif len(value) < min_length:
                sink.add(path, "bad_value", "must not be empty")
            elif explained is not None and (why := id_problem(value, pattern=explained)):
                sink.add(path, "bad_value", why, hint=_PATTERN_HINTS[explained])
            elif max_length is not None and len(value) > max_length:
                sink.add(
                    path,
                    "bad_value",
                    f"is {len(value)} characters long, over {max_length}",
                )
            elif pattern is not None and not pattern.search(value):
                sink.add(
                    path,
                    "bad_value",
                    f"{describe_value(value)} does not match the pattern {t.pattern}",
                    hint=_PATTERN_HINTS.get(t.pattern or ""),
                )

        return check

    def _literal(self, t: mi.LiteralType) -> Checker:
        values = tuple(str(v) for v in t.values)
        members = frozenset(values)

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not str or value not in members:
                allowed = self._declared_order(members, values)
                hint = did_you_mean(value, allowed) if isinstance(value, str) else None
                sink.add(
                    path,
                    "bad_value",
                    f"expected {quote_list(allowed)}, got {describe_value(value)}",
                    hint=hint,
                )

        return check

    def _bounds(self, t: mi.IntType | mi.FloatType) -> Callable[[Any], str | None]:
        gt, ge, lt, le = t.gt, t.ge, t.lt, t.le

        def out_of_bounds(value: Any) -> str | None:
            if gt is not None and not value > gt:
                return f"must be greater than {gt}, got {value!r}"
            if ge is not None and not value >= ge:
                return f"must be at least {ge}, got {value!r}"
            if lt is not None and not value < lt:
                return f"must be less than {lt}, got {value!r}"
            if le is not None and not value <= le:
                return f"must be at most {le}, got {value!r}"
            return None

        return out_of_bounds

    def _int(self, t: mi.IntType) -> Checker:
        out_of_bounds = self._bounds(t)

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not int:
                _type_error(t, value, path, sink)
            elif not _INT_MIN <= value <= _INT_MAX:
                sink.add(path, "bad_value", f"{value} is too large")
            elif (why := out_of_bounds(value)) is not None:
                sink.add(path, "bad_value", why)

        return check

    def _float(self, t: mi.FloatType) -> Checker:
        out_of_bounds = self._bounds(t)

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not float and type(value) is not int:
                _type_error(t, value, path, sink)
            elif type(value) is int and not _INT_MIN <= value <= _INT_MAX:
                sink.add(path, "bad_value", f"{value} is too large")
            elif (why := out_of_bounds(value)) is not None:
                sink.add(path, "bad_value", why)

        return check

    def _list(self, t: mi.ListType) -> Checker:
        item = self.compile(t.item_type)
        min_length = t.min_length or 0

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not list:
                _type_error(t, value, path, sink)
                return
            if len(value) < min_length:
                need = "at least one item" if min_length == 1 else f"at least {min_length} items"
                sink.add(path, "bad_value", f"must have {need}")
            for i, v in enumerate(value):
                item(v, (*path, i), sink)

        return check

    def _dict(self, t: mi.DictType) -> Checker:
        values = self.compile(t.value_type)

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not dict:
                _type_error(t, value, path, sink)
                return
            for k, v in value.items():
                values(v, (*path, k), sink)

        return check

    def _struct(self, t: mi.StructType) -> Checker:
        cls = t.cls
        if cls in self._structs:
            return self._structs[cls]
        # Register a trampoline first: Structs may be recursive.
        slot: list[Checker] = []

        def trampoline(value: Any, path: JsonPath, sink: Sink) -> None:
            slot[0](value, path, sink)

        self._structs[cls] = trampoline
        slot.append(self._build_struct(t))
        return trampoline

    def _declared_order(self, members: frozenset[str], values: tuple[str, ...]) -> tuple[str, ...]:
        """``members`` in the order a Struct declared them (else ``values``)."""
        for cls in self._unread_orders:  # in the order the Structs were built
            self._note_literal_orders(cls)
        self._unread_orders.clear()
        return self._literal_order.get(members, values)

    def _note_literal_orders(self, cls: type) -> None:
        """Remembers the declared order of each Literal in ``cls`` (msgspec sorts them)."""
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception:
            return
        stack = list(hints.values())
        while stack:
            hint = stack.pop()
            if typing.get_origin(hint) is typing.Literal:
                values = tuple(str(v) for v in typing.get_args(hint))
                self._literal_order.setdefault(frozenset(values), values)
            else:
                stack.extend(a for a in typing.get_args(hint) if not isinstance(a, msgspec.Meta))

    def _build_struct(self, t: mi.StructType) -> Checker:
        name = t.cls.__name__
        self._unread_orders.append(t.cls)
        fields = {f.encode_name: f for f in t.fields}
        checkers = {f.encode_name: self.compile(f.type) for f in t.fields}
        required = [f.encode_name for f in t.fields if f.required]
        optional_none = {f.encode_name for f in t.fields if not f.required and f.default is None}
        tag_field, tag = t.tag_field, t.tag
        known = list(fields) + ([tag_field] if tag_field else [])
        typos = CODON_TYPOS if name == "Codon" else None
        codon_fields: frozenset[str] = frozenset()
        if name == "Hank":
            from weft.config.schema import Codon

            # The names alone, which the class holds: type_info(Codon) would
            # evaluate its annotations again (about 5 ms at every first load).
            codon_fields = frozenset(Codon.__struct_encode_fields__)

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if type(value) is not dict:
                sink.add(
                    path, "wrong_type", f"expected an object ({name}), got {describe_value(value)}"
                )
                return
            if tag_field is not None and tag_field not in value and name != "Codon":
                sink.add(
                    (*path, tag_field),
                    "missing_key",
                    f'missing required key "{tag_field}"',
                    hint=f'add "{tag_field}": "{tag}"',
                )
            elif tag_field is not None and tag_field in value:
                got = value[tag_field]
                if got != tag:
                    hint = None
                    if name == "Codon" and got == "loop":
                        hint = 'loops cannot be nested: move this loop to the top level of "hank"'
                    sink.add(
                        (*path, tag_field),
                        "bad_value",
                        f'expected "{tag}", got {describe_value(got)}',
                        hint=hint,
                    )
                    # It is something else: its other keys would only add noise.
                    return
            for key, v in value.items():
                field = fields.get(key)
                if field is None:
                    if key != tag_field:
                        _unknown_key(key, known, typos, codon_fields, path, sink)
                    continue
                if v is None and key in optional_none:
                    sink.add(
                        (*path, key),
                        "wrong_type",
                        f"expected {_expected(field.type)}, got null",
                        hint="leave the key out to use the default",
                    )
                    continue
                checkers[key](v, (*path, key), sink)
            for key in required:
                if key not in value:
                    hint = None
                    if name == "Codon" and key == "model":
                        hint = 'set "model" here, or a default for every codon in overrides.model'
                    sink.add(
                        (*path, key), "missing_key", f'missing required key "{key}"', hint=hint
                    )

        return check

    def _union(self, t: mi.UnionType) -> Checker:
        tagged = _tagged_members(t)
        if tagged is not None:
            return self._tagged_union(t, tagged)
        members = [(m, self.compile(m), _kind_of(m)) for m in t.types]

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            kind = _json_type(value)
            candidates = [(m, c) for m, c, kinds in members if kind in kinds]
            if not candidates:
                _type_error(t, value, path, sink)
                return
            if len(candidates) == 1:
                candidates[0][1](value, path, sink)
                return
            first_problems: list[ConfigProblem] | None = None
            for _, c in candidates:
                trial = Sink(sink.file, sink.doc, hank_document=sink.hank_document)
                c(value, path, trial)
                if not trial.problems:
                    return
                if first_problems is None:
                    first_problems = trial.problems
            sink.problems.extend(first_problems or [])

        return check

    def _tagged_union(self, t: mi.UnionType, structs: list[mi.StructType]) -> Checker:
        tag_field = structs[0].tag_field
        assert tag_field is not None
        by_tag = {str(s.tag): self.compile(s) for s in structs}
        tags = list(by_tag)
        # A codon may leave out its type (the reference's default).
        default = "codon" if "codon" in by_tag else None
        allows_none = any(isinstance(_unwrap(m), mi.NoneType) for m in t.types)
        others = [m for m in t.types if not isinstance(_unwrap(m), mi.StructType | mi.NoneType)]
        other_checkers = [(self.compile(m), _kind_of(m)) for m in others]

        def check(value: Any, path: JsonPath, sink: Sink) -> None:
            if value is None and allows_none:
                return
            if type(value) is not dict:
                for c, kinds in other_checkers:
                    if _json_type(value) in kinds:
                        c(value, path, sink)
                        return
                what = f"an object with {tag_field} {quote_list(tags)}"
                if others:
                    what = f"{' or '.join(_expected(m) for m in others)} or {what}"
                sink.add(path, "wrong_type", f"expected {what}, got {describe_value(value)}")
                return
            got = value.get(tag_field, default)
            if got is None:
                sink.add(
                    (*path, tag_field),
                    "missing_key",
                    f'missing required key "{tag_field}" (one of {quote_list(tags)})',
                )
                return
            checker = by_tag.get(got) if isinstance(got, str) else None
            if checker is None:
                hint = did_you_mean(got, tags) if isinstance(got, str) else None
                sink.add(
                    (*path, tag_field),
                    "bad_value",
                    f"expected {quote_list(tags)}, got {describe_value(got)}",
                    hint=hint,
                )
                return
            checker(value, path, sink)

        return check


def _accept(value: Any, path: JsonPath, sink: Sink) -> None:
    return None


def _unknown_key(
    key: str,
    known: list[str],
    typos: dict[str, str] | None,
    codon_fields: frozenset[str],
    path: JsonPath,
    sink: Sink,
) -> None:
    hint = did_you_mean(key, known, typos)
    if hint is None and key in codon_fields:
        hint = f'"{key}" is a per-codon field: move it inside a codon in the "hank" array'
    if hint is None:
        hint = f"valid keys here: {', '.join(known)}"
    sink.add((*path, key), "unknown_key", f'unknown key "{key}"', hint=hint)


_COMPILER = _Compiler()
_BY_TYPE: dict[object, Checker] = {}


def check_value(value: Any, struct_type: object, path: JsonPath, sink: Sink) -> None:
    """Checks ``value`` against ``struct_type`` (a Struct class or type), into ``sink``."""
    checker = _BY_TYPE.get(struct_type)
    if checker is None:
        checker = _COMPILER.compile(mi.type_info(struct_type))
        _BY_TYPE[struct_type] = checker
    checker(value, path, sink)
