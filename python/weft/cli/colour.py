"""Colour for ``weft validate`` and ``weft status`` on a terminal.

:func:`wants_colour` says whether to colour a stream: a terminal, ``TERM``
not ``dumb``, and no ``NO_COLOR`` (https://no-color.org: any non-empty value
turns colour off). :func:`paint` wraps text in an ANSI style, or returns it
unchanged when colour is off, so callers build one string either way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

__all__ = ["STATUS_STYLES", "paint", "wants_colour"]

_CODES = {"red": "31", "green": "32", "yellow": "33", "cyan": "36", "bold": "1", "dim": "2"}

STATUS_STYLES = {
    "completed": "green",
    "failed": "red",
    "stopped": "yellow",
    "budget-stopped": "yellow",
    "crashed": "yellow",
    "running": "cyan",
    "live": "cyan",
    "skipped": "dim",
    "pending": "dim",
}
"""How a run or codon status is coloured."""


def wants_colour(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """Whether to colour what is written to ``stream``."""
    environ = os.environ if env is None else env
    if environ.get("NO_COLOR", ""):
        return False
    if environ.get("TERM", "").lower() == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, style: str | None, *, on: bool) -> str:
    """``text`` in ``style`` (a key of the palette) when ``on``; else unchanged."""
    code = _CODES.get(style or "")
    if not on or code is None:
        return text
    return f"\x1b[{code}m{text}\x1b[0m"
