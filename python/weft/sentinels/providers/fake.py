"""``fake/<model>``: a deterministic model for offline runs and tests.

The answer depends only on the request, so a run replays identically.
Directives in the rendered prompts (system or user) script the rest::

    @@sentinel:say The answer.@@             answer with this text
    @@sentinel:sleep ms=250@@                take this long (latency)
    @@sentinel:fail kind=rate-limit@@        fail every call ...
    @@sentinel:fail kind=api-error times=2@@ ... or only the first 2 calls
    @@sentinel:malformed@@                   structured output that breaks the schema
    @@sentinel:malformed kind=json@@         structured output that is not JSON

``kind`` is one of :data:`~weft.sentinels.providers.base.ErrorKind`. Without
``say``, text answers name the model and the prompt's size, and structured
answers are the simplest value the JSON Schema accepts. Tokens are a
quarter of the characters (rounded up); the price is that of the Claude
model the name suggests (``haiku``, ``sonnet``, ``opus``), so costs add up
offline as they would online.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any, Final

import orjson

from weft.agents.events import Tokens
from weft.sentinels.providers.base import ErrorKind, LlmRequest, LlmResponse, ProviderError

__all__ = ["PRICED_AS", "FakeProvider", "sample"]

_DIRECTIVE = re.compile(r"@@sentinel:([a-z]+)(.*?)@@", re.S)
_ATTR = re.compile(r"([a-z_]+)=(\S+)")
_KINDS: Final[frozenset[str]] = frozenset(
    ("auth", "rate-limit", "api-error", "connection", "timeout", "bad-output", "configuration")
)
_RETRIABLE: Final = frozenset(("rate-limit", "connection", "timeout"))
PRICED_AS: Final[dict[str, str]] = {
    "haiku": "claude-haiku-4-5",
    "sonnet": "claude-sonnet-4-5",
    "opus": "claude-opus-4-5",
}
"""The Claude model whose prices a ``fake/<alias>`` model costs."""
_MAX_SLEEP_MS: Final = 600_000


def sample(schema: Any, depth: int = 0) -> Any:
    """The simplest value ``schema`` accepts (best effort for the keywords
    sentinel schemas use: type, properties, required, items, enum, const,
    minItems, minimum)."""
    if not isinstance(schema, dict) or depth > 20:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return sample(schema[key][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    if kind == "object" or (kind is None and "properties" in schema):
        props: dict[str, Any] = schema.get("properties") or {}
        if not isinstance(props, dict):
            props = {}
        required: list[Any] = schema.get("required") or list(props)
        if not isinstance(required, list):
            required = list(props)
        return {k: sample(props.get(k, {}), depth + 1) for k in required}
    if kind == "array":
        count = schema.get("minItems", 1) if isinstance(schema.get("minItems"), int) else 1
        return [sample(schema.get("items", {}), depth + 1) for _ in range(max(count, 1))]
    if kind in ("number", "integer"):
        low = schema.get("minimum", 0)
        return low if isinstance(low, int | float) else 0
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    length = schema.get("minLength", 4) if isinstance(schema.get("minLength"), int) else 4
    return "fake" + "x" * max(0, length - 4)


def _tokens(chars: int) -> int:
    return (chars + 3) // 4


class FakeProvider:
    """The fake model (see the module docstring)."""

    name = "fake"

    def __init__(self) -> None:
        self._failures: Counter[str] = Counter()
        """Calls failed so far per ``fail`` directive (for ``times=N``)."""
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        """Answers as the directives say (see the module docstring)."""
        self.calls += 1
        prompt = "\n".join([request.system or "", *(m.content for m in request.messages)])
        directives = [(m.group(1), m.group(2).strip()) for m in _DIRECTIVE.finditer(prompt)]
        say: str | None = None
        malformed: str | None = None
        for verb, rest in directives:
            attrs = dict(_ATTR.findall(rest))
            if verb == "sleep":
                ms = int(attrs.get("ms", "0")) if attrs.get("ms", "0").isdigit() else 0
                await asyncio.sleep(min(ms, _MAX_SLEEP_MS) / 1000)
            elif verb == "fail":
                self._fail(rest, attrs)
            elif verb == "say" and say is None:
                say = rest
            elif verb == "malformed":
                malformed = attrs.get("kind", "schema")
        model = f"fake/{request.model}"
        value: Any = None
        if request.schema is not None:
            if malformed == "json":
                raise ProviderError(
                    "bad-output", "the model's structured output is not JSON: '{oops'"
                )
            value = {"unexpected": [1, 2, 3]} if malformed else sample(request.schema)
            if malformed and not (
                isinstance(request.schema, dict) and request.schema.get("type") == "object"
            ):
                value = {"not": "what the schema wants"}
            text = orjson.dumps(value).decode()
        elif say is not None:
            text = say
        else:
            lines = prompt.count("\n") + 1
            text = f"[{model}] read a prompt of {len(prompt)} characters in {lines} lines."
        tokens = Tokens(input=_tokens(len(prompt)), output=_tokens(len(text)))
        return LlmResponse(text, tokens, model, value=value)

    def _fail(self, rest: str, attrs: dict[str, str]) -> None:
        kind = attrs.get("kind", "api-error")
        if kind not in _KINDS:
            kind = "api-error"
        times = attrs.get("times")
        if times is not None and times.isdigit() and self._failures[rest] >= int(times):
            return
        self._failures[rest] += 1
        err_kind: ErrorKind = kind  # type: ignore[assignment]
        raise ProviderError(
            err_kind, f"fake {kind} (scripted by @@sentinel:fail@@)", retriable=kind in _RETRIABLE
        )

    async def aclose(self) -> None:
        """Nothing to close."""
