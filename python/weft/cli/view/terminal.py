"""Whether a stream is a terminal a live table can redraw (and not a CI log)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

from weft.cli.prompts import in_ci


def wants_live(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is a terminal a live table can redraw: a TTY, not
    ``TERM=dumb``, and not in CI, where redraws would flood a log (FORCE_COLOR is
    not enough: it is set in CI)."""
    env = os.environ if environ is None else environ
    if env.get("TERM", "").lower() in ("dumb", "unknown") or in_ci(env):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False
