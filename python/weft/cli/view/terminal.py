"""Whether a stream is a terminal a live table can redraw (and not a CI log)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "JENKINS_URL", "CIRCLECI", "TRAVIS")
"""Set in CI: the live view's redraws would flood a log, so lines are written instead."""


def wants_live(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is a terminal a live table can redraw: a TTY, not
    ``TERM=dumb``, and not in CI (FORCE_COLOR is not enough: it is set in CI)."""
    env = os.environ if environ is None else environ
    if env.get("TERM", "").lower() in ("dumb", "unknown") or any(env.get(v) for v in CI_VARIABLES):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False
