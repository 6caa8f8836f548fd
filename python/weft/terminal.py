"""Text from outside, made safe to show on a terminal.

Ids, names, messages, tool names and file names printed by ``weft run``,
``weft status``, ``weft thread`` and ``weft validate`` come from hank files
and from agents. A control character in them would reach the terminal raw:
an ESC sequence can move the cursor, recolour or retitle the terminal, hide
text or forge a line; a bidi override reorders what the reader sees; a
newline forges a whole log line. :func:`printable` is the one escaping
helper: every such character becomes a visible escape (``\\x1b``, ``\\n``,
``\\u202e``), everything else is left as it is.

Rich markup is a separate matter: the views hand user text to rich as
:class:`rich.text.Text`, never as a markup string, so ``[red]`` from an agent
stays literal.
"""

from __future__ import annotations

import unicodedata

__all__ = ["format_duration", "format_wait", "plural", "printable", "printable_lines"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

# Categories whose characters are invisible or act on the display: C0/C1
# controls and DEL (Cc), format characters such as bidi overrides, isolates
# and zero-width joiners (Cf), line and paragraph separators (Zl, Zp).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
# Zero-width (non-)joiners are format characters too, but they only join
# glyphs (emoji sequences, Persian and Indic scripts) and move nothing.
_JOINERS = frozenset({"\u200c", "\u200d"})


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control, format and separator character escaped.

    One line in, one line out: ``\\n`` is escaped too. Plain text (the common
    case) is returned unchanged without copying.
    """
    if text.isprintable():
        return text
    return "".join(
        _escape(ch)
        if ch not in _JOINERS and unicodedata.category(ch) in _ESCAPED_CATEGORIES
        else ch
        for ch in text
    )


def printable_lines(text: str) -> str:
    """Like :func:`printable` for each line of ``text``, keeping its line breaks."""
    return "\n".join(printable(line) for line in text.split("\n"))


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 problem``, ``2 problems``: ``count`` and ``noun`` in the right number
    (``many`` for irregular plurals; default ``noun + "s"``)."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"


def format_duration(seconds: float) -> str:
    """A human duration: ``<1s``, ``42s``, ``1m 05s``, ``2h 03m``."""
    whole = max(int(seconds), 0)
    if whole == 0:
        return "<1s"
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def format_wait(seconds: float) -> str:
    """A wait the run announces: like :func:`format_duration`, but under 10 s to
    the tenth (``1.5s``, ``0.3s``, ``2s``), so a Retry-After of 1.5 s or a 300 ms
    backoff is not shown as ``1s`` or ``<1s``."""
    if seconds >= 10:
        return format_duration(seconds)
    tenths = f"{max(seconds, 0.0):.1f}".removesuffix(".0")
    return f"{tenths}s"
