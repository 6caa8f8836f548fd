"""Rig ignore rules matched in linear time, with the answers of the ``re`` matcher they replace."""

from __future__ import annotations

import re
import time
import warnings

from hypothesis import given, settings
from hypothesis import strategies as st

from weft.runtime.rig.ignore import IgnoreRules, is_ignored

# Rules on which Python's re backtracked polynomially (1.06 s for the first
# against 250 characters; minutes against these names), and names made to hit it.
HOSTILE_RULES = [
    "*a*a*a*a*a*b",
    "*a*a*a*a*a*a*a*a*a*b",
    "**/a/**/a/**/a/**/b",
    "a/**/a/**/a/**/a/**/a/**/b",
    "*?*?*?*?*x",
    "[a]*[a]*[a]*[!b]*b",
    "**/*a*a*a*a*b/**",
]
HOSTILE_NAMES = ["a" * 4000, "a/" * 2000 + "a", "x" + "a" * 3998 + "c", "é" * 2000]


def test_hostile_rules_match_in_linear_time() -> None:
    rules = IgnoreRules(HOSTILE_RULES)
    started = time.perf_counter()
    for name in HOSTILE_NAMES:
        for is_dir in (False, True):
            assert rules.match(name, is_dir) is None
    # A generous bound: the new matcher takes milliseconds, the old one minutes.
    assert time.perf_counter() - started < 2.0
    assert rules.match("a" * 3999 + "b", False) is True
    assert rules.match("a/" * 1999 + "b", False) is True


def test_a_reversed_range_matches_nothing_as_in_git() -> None:
    # re refused "[z-a]" and the whole copy failed with its traceback.
    rules = IgnoreRules(["[z-a]x", "[z-ab]y"])
    assert rules.match("ax", False) is None
    assert rules.match("zx", False) is None
    assert rules.match("by", False) is True


def test_undecodable_names_are_one_character_per_byte_as_before() -> None:
    # os.scandir gives an undecodable byte as a lone surrogate (surrogateescape).
    name = b"x\xff.log".decode("utf-8", "surrogateescape")
    assert is_ignored([IgnoreRules(["x?.log"])], name, False)
    assert not is_ignored([IgnoreRules(["x??.log"])], name, False)
    assert is_ignored([IgnoreRules(["x[!a].log"])], name, False)
    assert is_ignored([IgnoreRules(["*.log"])], name, False)


# ----------------------------------------- the same answers as the re matcher


def _old_translate(pattern: str) -> str:
    """The translation to Python's re this module used before it matched in
    linear time, kept as the oracle."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                after = i + 2
                if before_ok and after == n:
                    out.append(".*")
                    i = after
                    continue
                if before_ok and pattern.startswith("/", after):
                    out.append("(?:.*/)?")
                    i = after + 1
                    continue
                while i < n and pattern[i] == "*":
                    i += 1
                out.append("[^/]*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


class _RefusedError(Exception):
    """re refused the rule (a reversed range)."""


def _old_match(line: str, rel: str, is_dir: bool) -> bool | None:
    """The old ``IgnoreRules([line]).match``; :class:`_RefusedError` where re refused the rule."""
    line = line.rstrip(" ") if not line.endswith("\\ ") else line
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated or line.startswith(("\\!", "\\#")):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    prefix = "" if anchored or line.startswith("**/") else "(?:.*/)?"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # re's "possible nested set" on [[a]
        try:
            regex = re.compile(prefix + _old_translate(line) + r"\Z", re.DOTALL)
        except re.error as exc:
            raise _RefusedError from exc
    if (dir_only and not is_dir) or not regex.match(rel):
        return None
    return not negated


RULE_ATOMS = ["a", "b", "*", "?", "/", "**", "[ab]", "[!a]", "[^b]", "[a-b]", "[]a]", "[a-]"]
RULE_ATOMS += ["é", "[!é]", "[é-ê]", "\\*", "\\", "-", "[", "[a-b-c]", "[--a]", "[[a]", "!", " "]
NAME_CHARS = ["a", "b", "c", "/", "-", "]", "[", "*", "\\", "é", "ê", "\udcff", "\n", "."]

small_rules = st.lists(st.sampled_from(RULE_ATOMS), min_size=1, max_size=7).map("".join)
small_names = st.lists(st.sampled_from(NAME_CHARS), min_size=1, max_size=10).map("".join)


@given(small_rules, small_names, st.booleans())
@settings(max_examples=2000)
def test_the_linear_matcher_agrees_with_the_re_one(rule: str, name: str, is_dir: bool) -> None:
    try:
        expected = _old_match(rule, name, is_dir)
    except _RefusedError:
        return  # a reversed range: the new matcher follows git (see the test above)
    assert IgnoreRules([rule]).match(name, is_dir) == expected
