"""Error classification from error text, for every adapter.

The API vocabulary (:func:`classify_api_error`, :func:`parse_retry_after`)
is shared by all three adapters: rate limits, billing, auth, 5xx... in the
order of reference hankweave-runtime §6.6. Claude reads it after its own
structured fields (error code, HTTP status).

Codex and Gemini report failures as sentences (an HTTP status at best), so
:func:`classify_error_text` finds the class by words: first the phrases only
Codex and Gemini use, then the API vocabulary, then the transport errors Codex
names in its own words. Retry-After waits are read from the same texts.
"""

from __future__ import annotations

import math
import re

from weft.agents.events import ErrorClass


class _Lazy:
    """A regular expression compiled on its first search.

    The thirty patterns here cost about 15 ms to compile, at the import of
    every adapter: before ``weft run``'s first agent starts, though most of
    them are read only when a session fails.
    """

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source = source
        self._flags = flags
        self._compiled: re.Pattern[str] | None = None

    def search(self, text: str) -> re.Match[str] | None:
        """:meth:`re.Pattern.search`, compiling the pattern the first time."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source, self._flags)
        return compiled.search(text)


# -- the API vocabulary (reference hankweave-runtime §6.5, §6.6) ----------------------------

_RATE = _Lazy(r"rate[ _-]?limit|too many requests", re.I)
_BILLING = _Lazy(
    r"billing|credit|insufficient|quota|available balance|out of budget|usage limit", re.I
)
_CLOUD_AUTH = _Lazy(
    r"accessdenied|unrecognizedclient|invalidsignature|expiredtoken|sso session"
    r"|could not load credentials|sts:assumerole",
    re.I,
)
_CLOUD_MODEL = _Lazy(r"on-demand throughput|invalid model identifier|resourcenotfound", re.I)
_TIMEOUT = _Lazy(r"timeout|timed out", re.I)
_AUTH = _Lazy(r"\b40[13]\b|authenticat|unauthori[sz]ed|forbidden|api[ _-]?key|oauth|/login", re.I)
_INVALID = _Lazy(r"invalid_request|validationexception|\b400\b", re.I)
_BARE_429 = _Lazy(r"\b429\b")
_TRANSPORT = _Lazy(
    r"econnreset|econnrefused|econnaborted|epipe|etimedout|enotfound|eai_again|socket"
    r"|fetch failed|connection (?:reset|closed|error)|stream terminated|network"
    r"|unable to connect",
    re.I,
)
_OVERLOADED = _Lazy(r"\b5\d\d\b|overloaded", re.I)
# Also how Claude tells a context error from other API errors in a result line.
CONTEXT_TEXT = _Lazy(
    r"output token maximum|prompt is too long|context_length_exceeded|maximum context length",
    re.I,
)
_API_RETRY_AFTER = (
    (_Lazy(r"retry-after-ms\W{0,3}(\d+(?:\.\d+)?)", re.I), 1.0),
    (
        _Lazy(r"retry[- ]after\W{0,3}(\d+(?:\.\d+)?)\s*(ms|milli\w*|s|sec\w*|m|min\w*)?", re.I),
        0,
    ),
    (_Lazy(r"try again in\s*(\d+(?:\.\d+)?)\s*(ms|milli\w*|s|sec\w*|m|min\w*)?", re.I), 0),
    (_Lazy(r"\bwait\s*(\d+(?:\.\d+)?)\s*(ms|milli\w*|s|sec\w*|m|min\w*)?", re.I), 0),
)


_API_ERROR_CLASSES: tuple[tuple[_Lazy, ErrorClass, bool], ...] = (
    (_RATE, ErrorClass.RATE_LIMIT, True),
    (_BILLING, ErrorClass.BILLING, False),
    (_CLOUD_AUTH, ErrorClass.AUTH, False),
    (_CLOUD_MODEL, ErrorClass.API_ERROR, False),
    (_TIMEOUT, ErrorClass.API_ERROR, True),
    (_AUTH, ErrorClass.AUTH, False),
    (CONTEXT_TEXT, ErrorClass.CONTEXT_EXCEEDED, False),
    (_INVALID, ErrorClass.API_ERROR, False),
    (_BARE_429, ErrorClass.RATE_LIMIT, True),
    (_TRANSPORT, ErrorClass.API_ERROR, True),
    (_OVERLOADED, ErrorClass.OVERLOADED, True),
)
"""(pattern, class, retriable), in the order of reference hankweave-runtime §6.6."""


def classify_api_error(text: str) -> tuple[ErrorClass, bool] | None:
    """The class and retriability an API error message names (the first
    matching row of :data:`_API_ERROR_CLASSES` wins), or ``None``."""
    for pattern, error_class, retriable in _API_ERROR_CLASSES:
        if pattern.search(text):
            return error_class, retriable
    return None


def parse_retry_after(text: str) -> int | None:
    """A retry delay named in an error message, in milliseconds:
    ``retry-after-ms: 1500``, ``retry after 30 s``, ``try again in 2 minutes``,
    ``wait 10 seconds`` (a bare number is seconds)."""
    for pattern, fixed in _API_RETRY_AFTER:
        m = pattern.search(text)
        if m is None:
            continue
        value = float(m.group(1))
        if fixed:
            return int(value * fixed)
        return int(value * _unit_ms(m.group(2)))
    return None


def _unit_ms(unit: str | None) -> float:
    """Milliseconds in one ``unit`` of a retry delay (a bare number is seconds)."""
    unit = (unit or "s").lower()
    if unit.startswith(("ms", "milli")):
        return 1.0
    if unit.startswith("m"):
        return 60_000.0
    return 1000.0


# -- Codex and Gemini ------------------------------------------------------------------------

_VENDOR_FIRST: tuple[tuple[ErrorClass, bool, _Lazy], ...] = (
    (
        ErrorClass.CANNOT_RESUME,
        False,
        _Lazy(
            r"no conversation found|no (?:saved )?sessions? found|no rollout found"
            r"|invalid session identifier|error resuming session"
            r"|(?:session|thread|conversation)\b[^\n]{0,80}\bnot found"
            r"|could not find (?:a |the )?(?:session|thread|rollout)",
            re.IGNORECASE,
        ),
    ),
    (
        ErrorClass.MAX_TURNS,
        False,
        _Lazy(r"max(?:imum)? session turns|maxsessionturns|turn limit", re.IGNORECASE),
    ),
    (
        ErrorClass.CONTEXT_EXCEEDED,
        False,
        _Lazy(
            r"context window|ran out of room|context_length_exceeded|maximum context"
            r"|input token count[^\n]{0,40}exceeds",
            re.IGNORECASE,
        ),
    ),
    # A model the account cannot use: Codex retries the 404 itself ("Reconnecting...
    # 1/2 (unexpected status 404 Not Found: The model `x` does not exist...)"), but
    # another attempt of the codon would fail the same way.
    (
        ErrorClass.API_ERROR,
        False,
        _Lazy(
            r"model\W{0,3}[\w.:/-]*\W{0,3} does not exist|model_not_found|404 not found",
            re.IGNORECASE,
        ),
    ),
    # OpenAI answers an exhausted plan with a 429 too; waiting does not help.
    (ErrorClass.BILLING, False, _Lazy(r"insufficient[_ ]quota", re.IGNORECASE)),
    # Google's 429 (a per-minute or per-day quota, which does clear) speaks
    # of quota too, which the shared rules would take for billing.
    (
        ErrorClass.RATE_LIMIT,
        True,
        _Lazy(
            r"resource[_ ]exhausted|resource has been exhausted|exhausted your capacity"
            r"|\b429\b",
            re.IGNORECASE,
        ),
    ),
    (
        ErrorClass.OVERLOADED,
        True,
        _Lazy(r"at capacity|high demand|\bunavailable\b", re.IGNORECASE),
    ),
    (
        ErrorClass.AUTH,
        False,
        _Lazy(r"api key not valid|auth method|not logged in", re.IGNORECASE),
    ),
    (
        ErrorClass.INPUT_ERROR,
        False,
        _Lazy(
            r"no (?:prompt|input) provided|unexpected argument|invalid value for"
            r"|unrecognized subcommand|unknown argument|cannot use both",
            re.IGNORECASE,
        ),
    ),
)

_VENDOR_LAST: tuple[tuple[ErrorClass, bool, _Lazy], ...] = (
    (
        ErrorClass.API_ERROR,
        True,
        _Lazy(r"stream disconnected|error sending request|reconnecting", re.IGNORECASE),
    ),
)

_RETRY_AFTER = _Lazy(
    r"(?:try again in|retry (?:after|in)|retrydelay\"?\s*[:=]\s*\"?|reset after)\s*"
    r"(?:(?P<h>\d+)h)?\s*(?:(?P<m>\d+)m(?!s))?\s*(?:(?P<n>\d+(?:\.\d+)?)\s*"
    r"(?P<unit>ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)?)?",
    re.IGNORECASE,
)

_RETRIABLE = frozenset(
    {
        ErrorClass.RATE_LIMIT,
        ErrorClass.OVERLOADED,
        ErrorClass.CRASH_MID_RUN,
        ErrorClass.TIMEOUT,
        ErrorClass.ERROR_RESULT,
    }
)
"""Classes a retry may cure when no message says otherwise (as for Claude)."""


def classify_error_text(text: str) -> tuple[ErrorClass, bool] | None:
    """The class and retriability a Codex or Gemini error message names, or
    ``None`` when it names nothing specific."""
    for cls, retriable, pattern in _VENDOR_FIRST:
        if pattern.search(text):
            return cls, retriable
    found = classify_api_error(text)
    if found is not None:
        return found
    for cls, retriable, pattern in _VENDOR_LAST:
        if pattern.search(text):
            return cls, retriable
    return None


def retry_after_ms(text: str) -> int | None:
    """The wait an error message asks for (``Please try again in 1.5s``,
    ``"retryDelay": "27s"``, ``reset after 2h36m24s``, ``retry-after-ms: 900``),
    in milliseconds."""
    match = _RETRY_AFTER.search(text)
    if match is None or not any(match.group("h", "m", "n")):
        return parse_retry_after(text)
    hours, minutes, number = match.group("h", "m", "n")
    total = 0.0
    if hours is not None:
        total += int(hours) * 3_600_000
    if minutes is not None:
        total += int(minutes) * 60_000
    if number is not None:
        total += float(number) * _unit_ms(match.group("unit"))
    return math.ceil(total)


def default_retriable(cls: ErrorClass) -> bool:
    """Whether a retry may help a session of class ``cls`` when no message
    says otherwise."""
    return cls in _RETRIABLE


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (for one-line messages)."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:500]
    return ""


_ERRORISH = _Lazy(
    r"error|fatal|fail|denied|invalid|exceed|limit|quota|unauthori|forbidden|overload"
    r"|unavailable|capacity|not found|no rollout|no conversation|auth|api key|login|turns"
    r"|no (?:prompt|input) provided|unexpected argument|unknown argument|cannot use both",
    re.IGNORECASE,
)


def error_lines(text: str) -> str:
    """The lines of a stderr tail that read like error reports. Only these
    are classified: stack traces carry numbers and words ("line 503",
    "timeout.rs") that would otherwise pass for an API error."""
    return "\n".join(line for line in text.splitlines() if _ERRORISH.search(line))


__all__ = [
    "CONTEXT_TEXT",
    "classify_api_error",
    "classify_error_text",
    "default_retriable",
    "error_lines",
    "last_line",
    "parse_retry_after",
    "retry_after_ms",
]
