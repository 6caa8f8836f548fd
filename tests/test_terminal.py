"""weft.terminal: the one escaping helper for text shown on a terminal."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from weft.terminal import printable, printable_lines


def test_escapes_and_named_controls_become_visible() -> None:
    assert printable("a\x1b[31mred\x07") == "a\\x1b[31mred\\x07"
    assert printable("one\ntwo\r\tx") == "one\\ntwo\\r\\tx"
    assert printable("x\u202eevil\u2066\x85\u2028") == "x\\u202eevil\\u2066\\x85\\u2028"
    assert printable("\x7f\x00") == "\\x7f\\x00"


def test_plain_text_joiners_and_markup_are_left_alone() -> None:
    for text in (
        "plain [red]markup[/]",
        "naïve café",
        "👨\u200d👩\u200d👧",
        "a\u200cb",
        "tab-free",
    ):
        assert printable(text) == text
    assert printable_lines("a\x1b\nb") == "a\\x1b\nb"


@given(st.text())
def test_nothing_that_acts_on_a_terminal_survives(text: str) -> None:
    out = printable(text)
    assert all(
        ch in "\u200c\u200d" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp")
        for ch in out
    )
    if text.isprintable():
        assert out == text
