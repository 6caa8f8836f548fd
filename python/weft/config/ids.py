"""The id rule: what a codon, loop or sentinel id may be.

Ids become parts of file names (``.weft/runs/<run>/<codonId>-<harness>.log``),
of git messages and of terminal lines, so an id is one plain path component:
ASCII letters, digits, ``_``, ``-`` and ``.``, not starting with ``.`` (so
never ``.`` or ``..``, never a hidden file) or ``-`` (never an option), at
most :data:`MAX_ID_LENGTH` characters. ``#`` is Weft's own: loop iterations
are ``<id>#<n>``. The reference runtime accepts any non-empty string; every
id in its examples and documentation fits this rule.

:data:`ID_PATTERN` is in the schema (so editors see it through the JSON
Schema and msgspec enforces it at load); :func:`id_problem` says in words
what is wrong with an id that does not match, for ``weft validate``.
"""

from __future__ import annotations

import unicodedata

from weft.terminal import printable

__all__ = ["ID_HINT", "ID_PATTERN", "MAX_ID_LENGTH", "SENTINEL_ID_PATTERN", "id_problem"]

MAX_ID_LENGTH = 128
"""The longest id: well under a file name's 255 bytes once ``-<harness>.log``
and a loop iteration's ``-<n>`` are added, and still readable in a table."""

ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
"""Codon and loop ids (the length bound is the schema's ``max_length``)."""

SENTINEL_ID_PATTERN = "^[a-z0-9-]+$"
"""Sentinel ids, as in the reference runtime (they name output folders)."""

ID_HINT = (
    'use ASCII letters, digits, "_", "-" and "." (not first), '
    f'at most {MAX_ID_LENGTH} characters, e.g. "draft-2"'
)

_SEPARATORS = ("/", "\\")


def _shown(ident: str) -> str:
    head = ident if len(ident) <= 40 else ident[:37] + "..."
    return f'"{printable(head)}"'


def _bad_char(ch: str) -> str:
    if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
        return f"the control character {printable(ch)}"
    if ch.isspace():
        return "whitespace"
    return f'the character "{ch}"'


def id_problem(ident: str, *, pattern: str = ID_PATTERN) -> str | None:
    """Why ``ident`` is not a valid id, in words (``None`` when it is one).

    ``pattern`` is :data:`ID_PATTERN` or :data:`SENTINEL_ID_PATTERN`.
    """
    sentinel = pattern == SENTINEL_ID_PATTERN
    what = "sentinel id" if sentinel else "id"
    if not ident:
        return f"{what} must not be empty"
    if len(ident) > MAX_ID_LENGTH:
        return f"{what} {_shown(ident)} is {len(ident)} characters long, over {MAX_ID_LENGTH}"
    for ch in ident:
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return f"{what} {_shown(ident)} contains {_bad_char(ch)}"
    if any(sep in ident for sep in _SEPARATORS):
        return f"{what} {_shown(ident)} contains a path separator; ids name files, one component"
    if ident in (".", ".."):
        return f"{what} {_shown(ident)} is not a name: it means a directory"
    if "#" in ident and not sentinel:
        return f'{what} {_shown(ident)} contains "#", which marks loop iterations (id#n)'
    if sentinel:
        for ch in ident:
            if not (ch.isascii() and (ch.isdigit() or ch.islower() or ch == "-")):
                return f"{what} {_shown(ident)} contains {_bad_char(ch)}; use a-z, 0-9 and -"
        return None
    if ident[0] in ".-":
        return f'{what} {_shown(ident)} starts with "{ident[0]}"'
    for ch in ident:
        if not (ch.isascii() and (ch.isalnum() or ch in "_.-")):
            return f"{what} {_shown(ident)} contains {_bad_char(ch)}"
    return None
