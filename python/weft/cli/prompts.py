"""Asking the person at the terminal: whether anyone can answer, and a [y/N] question.

:func:`in_ci` is the one CI detector; :func:`is_interactive` adds the
``--headless`` flag and whether stdin and stdout are terminals;
:func:`ask_yes_no` asks, and takes silence as no.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Mapping
from typing import TextIO

__all__ = ["CI_ENV_VARS", "PROMPT_TIMEOUT", "ask_yes_no", "in_ci", "is_interactive"]

PROMPT_TIMEOUT = 30.0
"""Seconds a [y/N] question waits before it counts as "no"."""
CI_ENV_VARS = (
    "CI",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "CIRCLECI",
    "TRAVIS",
    "BUILDKITE",
    "TF_BUILD",
)
"""Variables whose presence means a CI job, where nobody answers a prompt.
Any ``JENKINS*`` variable counts too."""

_FALSE_VALUES = frozenset({"", "0", "false", "no", "off"})


def in_ci(env: Mapping[str, str] | None = None) -> bool:
    """Whether this is a CI job: any of :data:`CI_ENV_VARS`, or a ``JENKINS*`` variable,
    set to something other than empty, ``0``, ``false``, ``no`` or ``off``."""
    environ = os.environ if env is None else env
    return any(
        (name in CI_ENV_VARS or name.startswith("JENKINS"))
        and value.strip().lower() not in _FALSE_VALUES
        for name, value in environ.items()
    )


def is_interactive(
    *,
    headless: bool = False,
    env: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> bool:
    """Whether a person can answer a prompt.

    Not when ``headless`` (an explicit flag), in CI (:func:`in_ci`), or when
    stdin or stdout is not a terminal.
    """
    if headless or in_ci(env):
        return False
    streams = (stdin or sys.stdin, stdout or sys.stdout)
    try:
        return all(s is not None and s.isatty() for s in streams)
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def ask_yes_no(
    question: str,
    *,
    timeout: float = PROMPT_TIMEOUT,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> bool:
    """Asks ``question [y/N]``; only ``y``/``yes`` is yes. No answer in time is no."""
    source = stdin or sys.stdin
    sink = stdout or sys.stderr
    sink.write(f"{question} [y/N] ")
    sink.flush()
    ready, _, _ = select.select([source], [], [], timeout)
    if not ready:
        sink.write(f"\nno answer within {timeout:g} s: taken as no\n")
        sink.flush()
        return False
    return source.readline().strip().lower() in ("y", "yes")
