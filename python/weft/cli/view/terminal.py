"""Whether a stream is a terminal a live table can redraw (and not a CI log),
and reading single keys from one."""

from __future__ import annotations

import contextlib
import os
import termios
import tty
from collections.abc import Iterator, Mapping
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


@contextlib.contextmanager
def single_keys(stream: TextIO) -> Iterator[bool]:
    """Single keys without Enter and without echo while inside, when ``stream``
    is the terminal of a foreground process (yields False otherwise, and changes
    nothing): a typed key never reaches the screen, where an echoed Enter would
    move the cursor under a live table and leave a stale copy of it behind.

    The terminal's settings are put back on every way out (an exception, a
    signal turned into one); Ctrl-C still sends SIGINT (cbreak keeps signals).
    A background job (``weft run &``) is left alone: reading or setting its
    terminal would stop it (SIGTTIN/SIGTTOU)."""
    try:
        fd = stream.fileno()
        saved = termios.tcgetattr(fd) if os.isatty(fd) and _foreground(fd) else None
    except (OSError, ValueError, termios.error):
        saved = None
    if saved is None:
        yield False
        return
    tty.setcbreak(fd, termios.TCSANOW)
    try:
        yield True
    finally:
        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _foreground(fd: int) -> bool:
    """Whether this process may read and set terminal ``fd``: it is in the
    terminal's foreground process group, or the terminal is not its controlling
    one (a pty handed over as stdin), where job control does not apply."""
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return True
