"""Pieces of Rust ``regex`` syntax for globs matched in linear time.

The globs of ``checkpointedFiles`` (:mod:`weft.checkpoints.patterns`) and of
rig ignore files (:mod:`weft.runtime.rig.ignore`) are matched against names
the agent creates, so the names are hostile. Python's ``re`` backtracks on
the regexes globs translate to: ``*a*a*a*b`` against a 250-character name
takes a second, and each further ``*`` multiplies that. Both modules compile
their regexes with :class:`weft._core.Pattern` (finite automata, linear in the
text), and build them from the pieces here:

- :func:`literal` one character, escaped;
- :func:`one_of` one character of a set of code-point ranges, and :data:`ONE_NOT_SLASH`
  (the glob's ``?``); :data:`RUN_NOT_SLASH` (``*``) and :data:`ANY_RUN` (``.*``);
- :func:`compile_anchored` the whole-text match, with the error a caller reports.

``Pattern`` matches the UTF-8 bytes of the text, a lone surrogate (an
undecodable byte of a file name, through ``surrogateescape``) as its
``surrogatepass`` bytes ``ED A0..BF 80..BF``. The pieces work on bytes where
they can: a run of any characters but ``/`` is a run of any bytes but ``/``
(no byte of a multi-byte sequence is ``/``), and one character is a lead byte
and the continuation bytes after it. That keeps the compiled program small
(a Unicode class is a UTF-8 automaton of many states, and 1,000 of them pass the
engine's size bound), and a lone surrogate is one character, as in ``re``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from weft._core import Pattern

__all__ = ["ANY_RUN", "ONE_NOT_SLASH", "RUN_NOT_SLASH", "compile_anchored", "literal", "one_of"]

_MAX_CODE: Final = 0x10FFFF
_SURROGATES: Final = (0xD800, 0xDFFF)
_SLASH: Final = ord("/")

RUN_NOT_SLASH: Final = r"(?-u:[^/])*"
"""Any run of characters without ``/``: ``re``'s ``[^/]*``."""
ANY_RUN: Final = r"(?s-u:.)*"
"""Any run of characters: ``re``'s ``.*`` under ``DOTALL``."""

_MULTI_BYTE: Final = r"[\xC0-\xFF][\x80-\xBF]*"
"""One non-ASCII character, by bytes. The trailing ``*`` may stop short of the
character's end only where what follows is a run (which takes the rest): every
other piece starts with a lead byte, so the language is the same."""


def literal(ch: str) -> str:
    """``ch`` as a regex that matches only it."""
    code = ord(ch)
    if ch.isascii() and (ch.isalnum() or ch == "_"):
        return ch
    if _SURROGATES[0] <= code <= _SURROGATES[1]:
        # Not a Unicode scalar value, so not in the pattern's syntax: its bytes.
        return "(?-u:" + "".join(f"\\x{b:02X}" for b in ch.encode("utf-8", "surrogatepass")) + ")"
    # A hex escape is valid for every other character, in and out of classes,
    # so no metacharacter of the Rust syntax (which are not Python's) slips through.
    return f"\\x{{{code:X}}}"


def _normalize(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX_CODE:
        out.append((nxt, _MAX_CODE))
    return out


def _clip(ranges: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and b >= lo]


def _surrogate_bytes(lo: int, hi: int) -> list[str]:
    """The ``surrogatepass`` encodings of code points ``lo..hi`` (all surrogates)."""
    out: list[str] = []
    for block in range((lo - 0xD800) >> 6, ((hi - 0xD800) >> 6) + 1):
        first = 0xD800 + (block << 6)
        a, b = max(lo, first) & 0x3F, min(hi, first + 0x3F) & 0x3F
        out.append(f"\\xED\\x{0xA0 + block:02X}[\\x{0x80 + a:02X}-\\x{0x80 + b:02X}]")
    return out


def one_of(ranges: Iterable[tuple[int, int]], *, negate: bool = False) -> str:
    """One character in the code-point ranges (inclusive), or not in them if ``negate``."""
    members = _normalize(ranges)
    if negate:
        members = _complement(members)
    if not members:
        return "[a&&b]"  # the empty class: matches nothing
    alternatives: list[str] = []
    ascii_part = _clip(members, 0, 0x7F)
    if ascii_part:
        alternatives.append(
            "(?-u:[" + "".join(f"\\x{a:02X}-\\x{b:02X}" for a, b in ascii_part) + "])"
        )
    high = _clip(members, 0x80, _MAX_CODE)
    if high == [(0x80, _MAX_CODE)]:
        alternatives.append(f"(?-u:{_MULTI_BYTE})")  # the common case: [!...] of ASCII
    else:
        scalar = [
            r
            for part in (_clip(high, 0x80, _SURROGATES[0] - 1), _clip(high, 0xE000, _MAX_CODE))
            for r in part
        ]
        if scalar:
            alternatives.append(
                "[" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in scalar) + "]"
            )
        for lo, hi in _clip(high, *_SURROGATES):
            alternatives.extend(f"(?-u:{s})" for s in _surrogate_bytes(lo, hi))
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


ONE_NOT_SLASH: Final = one_of([(_SLASH, _SLASH)], negate=True)
"""One character but ``/``: ``re``'s ``[^/]``."""


def compile_anchored(body: str) -> Pattern:
    """A pattern matching the whole text against ``body``; ``ValueError`` (the engine's
    message) when it does not compile, e.g. past the engine's size bound."""
    return Pattern(r"\A(?:" + body + r")\z")
