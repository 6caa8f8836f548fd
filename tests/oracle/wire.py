"""Strict decoding of transition bytes: accepts exactly what the Rust core's
serde derive + serde_json accept (``rust_core/src/state/transition.rs``).

Python's ``json`` is far more lenient than serde, so the text is parsed with
hooks that keep what serde can see (duplicate keys, key order, which integer
literals serde reads as floats) and every field is then checked against a
schema written in the Rust declaration order. The serde behaviours that matter
(all checked against the core):

* structs: unknown and duplicate fields are refused; a missing ``Option``
  field is ``None`` (with or without ``#[serde(default)]``); a struct may also
  be given as a JSON array of its fields in declaration order, where trailing
  fields may be left out only if they have ``#[serde(default)]``;
* integers are integers (no bool, no ``1.0``), in range; ``-0`` and literals
  outside i64/u64 are floats to serde_json; money also takes floats and is
  refused when NaN/infinite, negative or above 1e6 dollars;
* strings must not contain lone surrogates;
* unit enums are ``"name"`` or ``{"name": null}``;
* a transition is ``{"type", "data"}`` in either order or ``[type, data]``. When
  ``data`` comes first serde buffers it, which changes two things: a unit enum
  may also be ``{"name": {}}``, and the ``startingConditions`` tag may be a
  variant index. ``startingConditions`` itself is always buffered (internally
  tagged);
* free-form JSON (``serde_json::Value``) turns float-only integer literals into
  floats and keeps the last of duplicate keys; serde_json nests at most 127
  containers (only batch elements, read as raw values, have no limit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .codon import STATUSES


class MalformedError(Exception):
    """The bytes are not a transition (the core's ``malformed`` code)."""


@dataclass(frozen=True, slots=True)
class Money:
    """Whole nano-dollars, as the core keeps costs (exact, no float drift)."""

    nanos: int

    @property
    def usd(self) -> float:
        """Dollars, as the core serialises them: ``units as f64 / 1e9``."""
        return float(self.nanos) / 1e9


ZERO = Money(0)
MAX_USD = 1_000_000
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U32_MAX, U64_MAX = (1 << 32) - 1, (1 << 64) - 1
_MAX_DEPTH = 127  # serde_json's recursion limit, counted in nested containers

# --- parsing ---------------------------------------------------------------


class _Obj(dict[str, Any]):
    """A JSON object that remembers its raw key/value pairs (for duplicates)."""

    pairs: list[tuple[str, Any]]

    @property
    def dups(self) -> bool:
        return len(self.pairs) != len(self)


def _object(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj(pairs)
    obj.pairs = pairs
    return obj


class _Wide(int):
    """An integer literal serde_json reads as a float (``-0``, or outside the
    i64/u64 range); ``f`` is that float."""

    f: float


def _int(text: str) -> int:
    n = int(text)
    if (n == 0 and text.startswith("-")) or not I64_MIN <= n <= U64_MAX:
        wide = _Wide(n)
        wide.f = float(text)
        return wide
    return n


def _no_constant(name: str) -> Any:
    raise MalformedError(f"{name} is not JSON")


def _text(payload: bytes | str) -> str:
    if isinstance(payload, str):
        return payload
    try:
        return bytes(payload).decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedError(f"invalid UTF-8: {e}") from None


def _parse(payload: bytes | str) -> Any:
    try:
        return json.loads(
            _text(payload),
            object_pairs_hook=_object,
            parse_int=_int,
            parse_constant=_no_constant,
        )
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise MalformedError(str(e)) from None


def split_batch(payload: bytes | str) -> list[str]:
    """The elements of a JSON array, as text (serde's ``Vec<&RawValue>``).

    Raises ``ValueError`` like ``Core.apply_batch`` when it is not an array.
    """
    try:
        text = _text(payload)
    except MalformedError as e:
        raise ValueError(f"apply_batch expects a JSON array of transitions: {e}") from None
    # Only element boundaries are needed: raw values accept any valid JSON.
    decoder = json.JSONDecoder(
        parse_int=lambda _: 0, parse_float=lambda _: 0.0, parse_constant=_no_constant
    )
    ws = " \t\n\r"

    def skip(i: int) -> int:
        while i < len(text) and text[i] in ws:
            i += 1
        return i

    def fail(why: str) -> ValueError:
        return ValueError(f"apply_batch expects a JSON array of transitions: {why}")

    i = skip(0)
    if not text.startswith("[", i):
        raise fail("not an array")
    i = skip(i + 1)
    elements: list[str] = []
    if text.startswith("]", i):
        i += 1
    else:
        while True:
            try:
                _, end = decoder.raw_decode(text, i)
            except (ValueError, RecursionError, MalformedError) as e:
                raise fail(str(e)) from None
            elements.append(text[i:end])
            i = skip(end)
            if text.startswith(",", i):
                i = skip(i + 1)
            elif text.startswith("]", i):
                i += 1
                break
            else:
                raise fail("expected `,` or `]`")
    if skip(i) != len(text):
        raise fail("trailing characters")
    return elements


# --- field decoders --------------------------------------------------------
# A decoder takes (value, buffered) and returns the value as the state holds
# it, or raises MalformedError. ``buffered`` is true inside serde's Content
# buffer (see the module docstring).

Decoder = Callable[[Any, bool], Any]


def _bad(what: str, v: Any) -> MalformedError:
    return MalformedError(f"expected {what}, got {v!r:.60}")


def _has_surrogate(s: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in s)


def string(v: Any, _b: bool) -> str:
    if type(v) is not str or _has_surrogate(v):
        raise _bad("a string", v)
    return v


def boolean(v: Any, _b: bool) -> bool:
    if type(v) is not bool:
        raise _bad("a boolean", v)
    return v


def integer(lo: int, hi: int) -> Decoder:
    def dec(v: Any, _b: bool) -> int:
        if type(v) is not int or not lo <= v <= hi:
            raise _bad(f"an integer in [{lo}, {hi}]", v)
        return v

    return dec


i64, u32, u64 = integer(I64_MIN, I64_MAX), integer(0, U32_MAX), integer(0, U64_MAX)


def f64(v: Any, _b: bool) -> float:
    if type(v) is int:
        return float(v)
    if type(v) is _Wide:
        x = v.f
    elif type(v) is float:
        x = v
    else:
        raise _bad("a number", v)
    if not math.isfinite(x):
        raise MalformedError("number out of range")
    return x


def money(v: Any, b: bool) -> Money:
    """``Money``: round-ties-even to nano-dollars of a finite amount in [0, 1e6]."""
    x = f64(v, b)
    if x < 0 or x > MAX_USD:
        raise _bad("a cost in [0, 1e6]", v)
    return Money(round(x * 1e9))


def optional(dec: Decoder) -> Decoder:
    def opt(v: Any, b: bool) -> Any:
        return None if v is None else dec(v, b)

    return opt


def list_of(dec: Decoder) -> Decoder:
    def seq(v: Any, b: bool) -> list[Any]:
        if type(v) is not list:
            raise _bad("an array", v)
        return [dec(x, b) for x in v]

    return seq


def _is_unit(v: Any, b: bool) -> bool:
    return v is None or (b and isinstance(v, _Obj) and not v.pairs)


def unit_enum(*names: str) -> Decoder:
    """A fieldless enum: ``"name"`` or ``{"name": null}`` (``{}`` if buffered)."""

    def dec(v: Any, b: bool) -> str:
        if type(v) is str and v in names:
            return v
        if isinstance(v, _Obj) and len(v.pairs) == 1:
            name, unit = v.pairs[0]
            if name in names and _is_unit(unit, b):
                return name
        raise _bad(f"one of {names}", v)

    return dec


def json_value(depth: int) -> Decoder:
    """``serde_json::Value`` nested inside ``depth`` containers: as serde
    re-serialises it (float-literal integers become floats, duplicate keys keep
    the last value)."""

    def dec(v: Any, _b: bool, depth: int = depth) -> Any:
        if v is None or type(v) in (bool, int):
            return v
        if type(v) is str:
            return string(v, _b)
        if type(v) in (float, _Wide):
            return f64(v, _b)
        if depth + 1 > _MAX_DEPTH:
            raise MalformedError("recursion limit exceeded")
        if type(v) is list:
            return [dec(x, _b, depth + 1) for x in v]
        out: dict[str, Any] = {}
        for key, x in v.pairs:
            out[string(key, _b)] = dec(x, _b, depth + 1)
        return out

    return dec


# --- structs ---------------------------------------------------------------

_REQUIRED = object()  #: no default: must be given
_NONE_IF_MISSING = object()  #: ``Option`` without ``#[serde(default)]``


@dataclass(frozen=True, slots=True)
class Field:
    """One struct field: wire name, decoder, default (or a marker above).

    ``skip_none`` fields are dropped from the decoded dict when ``None``, as
    the core omits them (``skip_serializing_if = "Option::is_none"``); a
    ``null`` plan-entry codon or ``afterCodon`` is kept.
    """

    name: str
    dec: Decoder
    default: Any = _REQUIRED
    skip_none: bool = False


def opt_field(name: str, dec: Decoder) -> Field:
    """An ``Option`` field with ``#[serde(default)]``, omitted when ``None``."""
    return Field(name, optional(dec), None, skip_none=True)


def struct(*fields: Field) -> Decoder:
    """A ``deny_unknown_fields`` struct, from a map or a sequence."""
    names = {f.name for f in fields}

    def dec(v: Any, b: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if isinstance(v, _Obj):
            if v.dups or not names.issuperset(v):
                raise _bad(f"fields {sorted(names)}", v)
            for f in fields:
                if f.name in v:
                    out[f.name] = f.dec(v[f.name], b)
                elif f.default is _REQUIRED:
                    raise MalformedError(f"missing field `{f.name}`")
                else:
                    out[f.name] = None if f.default is _NONE_IF_MISSING else f.default
        elif type(v) is list:
            if len(v) > len(fields):
                raise MalformedError("trailing elements")
            for i, f in enumerate(fields):
                if i < len(v):
                    out[f.name] = f.dec(v[i], b)
                elif f.default in (_REQUIRED, _NONE_IF_MISSING):
                    raise MalformedError(f"invalid length {len(v)}")
                else:
                    out[f.name] = f.default
        else:
            raise _bad("a struct", v)
        return {f.name: out[f.name] for f in fields if out[f.name] is not None or not f.skip_none}

    return dec


def _variant_index(v: Any, names: tuple[str, ...], b: bool) -> str:
    """A variant identifier: its name, or (from a buffer only) its index."""
    if type(v) is str and v in names:
        return v
    if b and type(v) is int and 0 <= v < len(names):
        return names[v]
    raise _bad(f"one of {names}", v)


def tagged(tag: str, variants: dict[str, Decoder]) -> Decoder:
    """An internally tagged enum (``#[serde(tag = ...)]``): the fields are
    always buffered; only the tag itself is read directly."""
    names = tuple(variants)

    def dec(v: Any, b: bool) -> dict[str, Any]:
        rest: Any
        if isinstance(v, _Obj):
            if v.dups or tag not in v:
                raise _bad(f"a map with one `{tag}`", v)
            name = _variant_index(v[tag], names, b)
            rest = _object([(k, x) for k, x in v.pairs if k != tag])
        elif type(v) is list and v:
            name = _variant_index(v[0], names, b)
            rest = v[1:]
        else:
            raise _bad(f"a `{tag}`-tagged map", v)
        return {tag: name, **variants[name](rest, True)}

    return dec


# --- schemas (field order = Rust declaration order) --------------------------

STATUS = unit_enum(*STATUSES)

TOKENS = struct(
    *(
        Field(n, u64, 0)
        for n in ("inputTokens", "outputTokens", "cacheCreationTokens", "cacheReadTokens")
    )
)
FAILURE_REASON = struct(
    Field("type", string),
    Field("retriable", boolean),
    opt_field("message", string),
    opt_field("retryAfterMs", u64),
    opt_field("sentinelRefs", list_of(string)),
)
BUDGET_EXCEEDED = struct(Field("currency", string), Field("limit", f64), Field("used", f64))
# A codon's loop context only arrives in CodonStarted, as data.loopContext, so
# its loopBudget sits inside 3 containers (envelope, data, loopContext).
LOOP_CONTEXT = struct(
    Field("loopId", string),
    Field("iteration", u32),
    Field("codonIndexInLoop", u32),
    opt_field("loopBudget", json_value(3)),
)
SENTINEL_STATE = struct(
    Field("id", string),
    Field("model", string),
    Field("loadedAt", string),
    opt_field("unloadedAt", string),
    Field("llmCallCount", u64),
    Field("failedLLMCalls", u64),
    opt_field("lastLlmCallAt", string),
    Field("totalTriggers", u64, 0),
    Field("totalCost", money),
    Field("status", unit_enum("active", "unloaded")),
    opt_field("unloadReason", unit_enum("codon-complete", "fatal-error", "consecutive-failures")),
)
STARTING_CONDITIONS = tagged(
    "type",
    {
        "fresh": struct(opt_field("initialCheckpointSha", string)),
        "continuation": struct(
            Field(
                "source",
                struct(
                    Field("runId", string),
                    Field("afterCodon", optional(string), _NONE_IF_MISSING),
                    Field("checkpointSha", string),
                ),
            ),
            opt_field("reason", unit_enum("retry", "rollback", "continue")),
        ),
    },
)
# A plan entry sits inside 4 containers (envelope, data, executionPlan, entry).
PLAN_ENTRY = struct(
    Field("codon", json_value(4)),
    Field("codonId", string),
    opt_field("loopContext", json_value(4)),
)
METADATA = struct(
    opt_field("claudePid", i64),
    opt_field("claudeLogPath", string),
    opt_field("previousSessionId", string),
    opt_field("claudeSessionId", string),
    opt_field("exitCode", i64),
    opt_field("failureReason", FAILURE_REASON),
    opt_field("failedDuring", string),
    opt_field("skippedDuring", string),
    opt_field("resultMessageReceived", boolean),
    opt_field("checkpointSha", string),
    opt_field("contextExceeded", boolean),
    opt_field("extensionCount", u64),
    opt_field("budgetExceeded", BUDGET_EXCEEDED),
)

_RUN, _CODON = Field("runId", string), Field("codonId", string)
_RUN_ENDED = struct(_RUN, Field("endTime", string))
BUDGET_STOP = struct(
    Field("scope", string),
    Field("kind", string),
    Field("limit", f64),
    Field("used", f64),
    Field("source", string, ""),
)

#: The seventeen transition types, in declaration order, with their data.
TRANSITIONS: dict[str, Decoder] = {
    "RunStarted": struct(
        _RUN,
        Field("runFolder", string),
        Field("gitBranch", string),
        Field("startingConditions", STARTING_CONDITIONS),
        Field("serverPid", i64),
        Field("startTime", string),
        opt_field("executionPlan", list_of(PLAN_ENTRY)),
    ),
    "RunCompleted": _RUN_ENDED,
    "RunFailed": struct(
        _RUN, Field("endTime", string), opt_field("codonId", string), opt_field("reason", string)
    ),
    "RunStopped": struct(
        _RUN,
        Field("endTime", string),
        Field("by", unit_enum("user", "budget")),
        Field("forced", boolean, False),
        Field("reason", string),
        opt_field("codonId", string),
        opt_field("budget", BUDGET_STOP),
    ),
    "RunCrashed": struct(_RUN, Field("detectedAt", string), Field("lastCodonStatus", string)),
    "CodonStarted": struct(
        _RUN, _CODON, Field("startTime", string), opt_field("loopContext", LOOP_CONTEXT)
    ),
    "CodonTransitioned": struct(
        _RUN,
        _CODON,
        Field("from", STATUS),
        Field("to", STATUS),
        Field("timestamp", string),
        opt_field("metadata", METADATA),
    ),
    "CostsUpdated": struct(_RUN, _CODON, Field("cost", money), Field("tokens", TOKENS)),
    "CostsIncremented": struct(
        _RUN, _CODON, Field("costDelta", money), Field("tokensDelta", TOKENS)
    ),
    "AssistantMessageCountUpdated": struct(_RUN, _CODON, Field("newCount", u64)),
    "ExtensionCountUpdated": struct(_RUN, _CODON, Field("extensionCount", u64)),
    "CodonFinalCostSet": struct(
        _RUN, _CODON, Field("finalCost", money), Field("finalTokens", TOKENS)
    ),
    "SentinelStatesUpdated": struct(
        _RUN, _CODON, Field("sentinelStates", list_of(SENTINEL_STATE)), Field("totalCost", money)
    ),
    "CheckpointCreated": struct(
        _RUN,
        _CODON,
        Field("checkpointType", unit_enum("rig-setup", "completed", "error", "skipped")),
        Field("sha", string),
        Field("branch", string),
    ),
    "InitialCheckpointSet": struct(Field("sha", string)),
    "PlanExtended": struct(
        _RUN, Field("afterCodonId", string), Field("entries", list_of(PLAN_ENTRY))
    ),
    "PlanTrimmed": struct(_RUN, Field("codonIds", list_of(string))),
}
_KIND = unit_enum(*TRANSITIONS)


def decode_transition(payload: bytes | str) -> tuple[str, dict[str, Any]]:
    """(type name, decoded data) of one transition; ``MalformedError`` otherwise."""
    doc = _parse(payload)
    if isinstance(doc, _Obj):
        # Adjacently tagged: the tag is read as an enum, so {"Name": null} works.
        if doc.dups or set(doc) != {"type", "data"}:
            raise _bad('exactly "type" and "data"', doc)
        kind = _KIND(doc["type"], False)
        keys = list(doc)
        buffered = keys.index("data") < keys.index("type")
        data = doc["data"]
    elif type(doc) is list and len(doc) == 2:
        if type(doc[0]) is not str or doc[0] not in TRANSITIONS:
            raise _bad("a transition type", doc[0])
        kind, data, buffered = doc[0], doc[1], False
    else:
        raise _bad("a transition", doc)
    return kind, TRANSITIONS[kind](data, buffered)
