"""The inline form of a condition (the trigger engine's generated code) decides
as its compiled predicate does, whether its field is read in place or was
read once before (a field several sentinels test). ``matches`` runs in time
linear in the text whatever the pattern (a corpus of evil patterns on long
hostile text), means what JavaScript means, and agrees with a backtracking
engine on the patterns both accept (a differential property)."""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tests.sentinels.test_triggers import conditions, datas

from weft.config.schema import Condition
from weft.sentinels.conditions import _NUMBER_TYPES, compile_condition, inline_condition


@settings(max_examples=300, deadline=None)
@given(condition=conditions, data=datas)
def test_inline_condition_decides_as_the_predicate(condition: Condition, data: Any) -> None:
    expected = compile_condition(condition)(data)
    for fetched in (None, {condition.path: "h0"}):
        ns: dict[str, Any] = {"_NUMBER_TYPES": _NUMBER_TYPES}
        source = inline_condition(condition, "c0", ns, fetched)
        test = eval(f"lambda data, h0: {source}", ns)
        assert bool(test(data, data.get(condition.path))) == expected, source


# --------------------------------------------------------------------------- matches: linear time

HOSTILE_LENGTH = 50_000
"""Characters of agent-written text for each evil pattern: a backtracking
engine needs longer than the age of the universe on most of them (Python's
``re`` takes over 3 s on ``^(a+)+$`` at 24 characters, doubling with each)."""

REDOS_CORPUS: list[tuple[str, str]] = [
    (r"^(a+)+$", "a"),
    (r"^(a|aa)+$", "a"),
    (r"^(a|a?)+$", "a"),
    (r"^(.*a){20}$", "a"),
    (r"^([a-zA-Z]+)*$", "a"),
    (r"^(\w+\s?)*$", "a"),
    (r"^(a*)*$", "a"),
    (r"^(x+x+)+y$", "x"),
    (r"^(\d+)*$", "1"),
    (r"^([a-zA-Z0-9_.-])+@(([a-zA-Z0-9-])+\.)+([a-zA-Z0-9]{2,4})+$", "a"),
    (r"^(([a-z])+.)+[A-Z]([a-z])+$", "a"),
    (r"(\w|\d|[0-9a-z])*!\d", "a"),
]
"""Classic evil patterns (nested or overlapping quantifiers), each with the
character whose long run, ended by ``!``, makes a backtracker try every way
to split the run."""


def _matches(pattern: str) -> Any:
    return compile_condition(Condition(path="content", operator="matches", value=pattern))


def test_evil_patterns_finish_on_long_hostile_text() -> None:
    corpus = [(_matches(p), {"content": c * HOSTILE_LENGTH + "!"}, p) for p, c in REDOS_CORPUS]
    trivial = _matches("!")
    baseline_data = corpus[0][1]
    started = time.perf_counter()
    assert trivial(baseline_data)
    baseline = time.perf_counter() - started
    started = time.perf_counter()
    found = [test(data) for test, data, _ in corpus]
    elapsed = time.perf_counter() - started
    assert found == [False] * len(REDOS_CORPUS)
    # A hang detector, not a benchmark: linear matching takes about 0.1 ms a
    # pattern here (some 20 times the trivial one; 2 ms for the corpus), the
    # old engine forever.
    assert elapsed < 2.0, f"{elapsed:.3f}s for the corpus, {baseline:.6f}s for the trivial one"
    # The first ones do match what they are meant to (the text without "!").
    firsts = [(test, c) for (test, _, _), (_, c) in zip(corpus[:3], REDOS_CORPUS, strict=False)]
    assert all(test({"content": c * 1000}) for test, c in firsts)


def test_a_long_search_lets_other_threads_run() -> None:
    """Above 4 KiB the search runs detached from the interpreter: a thread
    gets to run Python while it goes on (here a pattern whose DFA the random
    text keeps rebuilding, so the search takes a while)."""
    rng = random.Random(7)
    text = "".join(rng.choice("ab") for _ in range(200_000))
    test = _matches(r".*a.{100}c")
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        time.sleep(0.01)
        started = time.perf_counter()
        assert not test({"content": text})
        ended = time.perf_counter()
    finally:
        stop.set()
        ticker.join()
    assert ended - started > 0.05, "the search was too quick to tell"
    inside = [t for t in ticks if started + 0.01 < t < ended - 0.01]
    assert inside, f"no tick during a {ended - started:.3f}s search"


# The differential test: a pattern written in the JavaScript syntax, and the
# same pattern spelled for Python's `re` with JavaScript's meaning (ASCII \d \w
# \b, JavaScript's \s, `.` stopping at the four line terminators, `$` only at
# the very end), must decide every text alike. Python's `re` is the oracle; the
# texts are short, so its backtracking stays cheap.

_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_ATOMS: list[tuple[str, str]] = [
    ("a", "a"),
    ("b", "b"),
    ("-", "-"),
    (r"\.", r"\."),
    (".", "[^\n\r\u2028\u2029]"),
    (r"\d", "[0-9]"),
    (r"\D", "[^0-9]"),
    (r"\w", "[0-9A-Za-z_]"),
    (r"\W", "[^0-9A-Za-z_]"),
    (r"\s", f"[{_JS_SPACE}]"),
    (r"\S", f"[^{_JS_SPACE}]"),
    ("[a-c]", "[a-c]"),
    ("[^ab]", "[^ab]"),
    (r"[\d_]", "[0-9_]"),
    (r"[\w-]", r"[0-9A-Za-z_\-]"),
    ("[.]", r"[.]"),
    (r"\x61", "a"),
    (r"\u00e9", "\u00e9"),
    ("[^]", r"[\s\S]"),
    ("[]", r"(?!)"),
]
_ANCHORS: list[tuple[str, str]] = [
    ("^", "^"),
    ("$", r"\Z"),
    (r"\b", r"\b"),
    # \B is refused (test_jsregex.py): the automaton's ASCII \B matched inside the
    # bytes of one character ("9\xa09"), which this test found.
]
_QUANTIFIERS = ["*", "+", "?", "{2}", "{1,3}", "{0,}", "*?", "+?", "??"]


def _regexes() -> st.SearchStrategy[tuple[str, str]]:
    leaves = st.sampled_from(_ATOMS + _ANCHORS)

    def extend(
        inner: st.SearchStrategy[tuple[str, str]],
    ) -> st.SearchStrategy[tuple[str, str]]:
        group = st.tuples(st.sampled_from(["(", "(?:", "(?<g>"]), inner).map(
            lambda t: (f"{t[0]}{t[1][0]})", f"(?:{t[1][1]})")
        )
        quantified = st.tuples(
            st.one_of(group, st.sampled_from(_ATOMS)), st.sampled_from(_QUANTIFIERS)
        ).map(lambda t: (t[0][0] + t[1], t[0][1] + t[1]))
        seq = st.lists(st.one_of(inner, quantified), min_size=2, max_size=4).map(
            lambda parts: ("".join(p[0] for p in parts), "".join(p[1] for p in parts))
        )
        alt = st.tuples(inner, inner).map(
            lambda t: (f"{t[0][0]}|{t[1][0]}", f"{t[0][1]}|{t[1][1]}")
        )
        return st.one_of(group, quantified, seq, alt)

    return st.recursive(leaves, extend, max_leaves=8)


_TEXT = st.text(alphabet="ab_-.9 \n\r\t\u00a0\u2028\ufeff\u00e9\u0663", max_size=12)


@settings(max_examples=400, deadline=None)
@given(pattern=_regexes(), text=_TEXT)
def test_matches_agrees_with_a_backtracking_engine_on_the_safe_subset(
    pattern: tuple[str, str], text: str
) -> None:
    js, python = pattern
    # A named group may occur once in the JavaScript pattern; the oracle's
    # groups are all (?:...), so only the JavaScript side needs this.
    assume(js.count("(?<g>") <= 1)
    expected = re.search(python, text, re.ASCII) is not None
    assert _matches(js)({"content": text}) is expected, (js, python, text)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        (r"\d", "\u0663", False),  # ARABIC-INDIC DIGIT THREE: not a JavaScript \d
        (r"\w", "\u00e9", False),
        (r"\s", "\ufeff", True),  # JavaScript's \s holds the BOM
        (r"\s", "\x1c", False),  # Python's \s holds the file separators
        (r"^a$", "a\n", False),  # Python's $ matches before a final newline
        (r"a.b", "a\rb", False),
        (r"a.b", "a\u2028b", False),
        (r"a.b", "a\u00e9b", True),
        (r"\bb", "\u00e9b", True),  # é is no word character in JavaScript
        (r"(?<word>ab)c", "abc", True),  # Python's re refuses this syntax
        (r"a{,2}", "a{,2}", True),  # Annex B: a brace that starts nothing is literal
        (r"\p{L}", "p{L}", True),  # without the u flag, \p is "p"
        (r"[\d-z]", "-", True),
        (r"\uD83D\uDE00", "\U0001f600", True),  # a surrogate pair is one character
        (r"\cJ", "\n", True),
        (r"\.ts$", "src/app.ts", True),  # Hankweave's qa-bot, on file.updated's path
        (r"\.ts$", "src/app.tsx", False),
        ("(?i)drop table", "DROP TABLE x", True),
        ("a(?i:b)c", "aBc", True),
        ("a(?i:b)c", "aBC", False),
        ("[]", "", False),
        ("[^]", "\n", True),
        ("a", "\udcff a", True),  # a lone surrogate (surrogateescape'd bytes) is matched past
    ],
)
def test_matches_means_what_javascript_means(pattern: str, text: str, expected: bool) -> None:
    assert _matches(pattern)({"content": text}) is expected
