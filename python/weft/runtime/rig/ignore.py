"""Ignore rules of a rig copy: gitignore patterns, matched as git matches them.

A copied folder skips what the hank folder's ``.gitignore`` names (else the
reference runtime's :data:`DEFAULT_IGNORES`); a ``.gitignore`` inside the
copied tree adds rules for its own subtree, and deeper files win, as in git.
Patterns follow gitignore: ``!`` negation, ``/`` anchoring, trailing ``/`` for
folders, ``*``, ``?``, ``[...]``, ``**``. Pure: no I/O except reading the root
``.gitignore`` in :func:`root_rules`.

The paths matched are the work tree's, named by the agent, so hostile: each
rule is a :class:`weft._core.Pattern` (finite automata, linear in the path,
whatever the rule), built from :mod:`weft.linear_glob`; Python's ``re`` took a
second on ``*a*a*a*b`` against a 250-character name, and more with each ``*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from weft._core import Pattern
from weft.linear_glob import (
    ANY_RUN,
    ONE_NOT_SLASH,
    RUN_NOT_SLASH,
    compile_anchored,
    literal,
    one_of,
)

__all__ = ["DEFAULT_IGNORES", "IgnoreRules", "is_ignored", "root_rules"]

DEFAULT_IGNORES = ("node_modules/", "dist/", "*.log")
"""Ignore rules of a copy when the hank folder has no ``.gitignore``."""


def _translate(pattern: str) -> str:
    """A gitignore glob (already stripped of ``!``, anchoring and trailing ``/``) as a regex
    (Rust syntax) over a relative POSIX path."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                after = i + 2
                if before_ok and after == n:
                    out.append(ANY_RUN)
                    i = after
                    continue
                if before_ok and pattern.startswith("/", after):
                    out.append(f"(?:{ANY_RUN}/)?")
                    i = after + 1
                    continue
                while i < n and pattern[i] == "*":
                    i += 1
                out.append(RUN_NOT_SLASH)
                continue
            out.append(RUN_NOT_SLASH)
        elif c == "?":
            out.append(ONE_NOT_SLASH)
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] in "!^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(literal(c))
            else:
                body = pattern[i + 1 : j]
                negate = body[:1] in ("!", "^")
                out.append(one_of(_class_ranges(body[1:] if negate else body), negate=negate))
                i = j
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(literal(pattern[i]))
        else:
            out.append(literal(c))
        i += 1
    return "".join(out)


def _class_ranges(body: str) -> list[tuple[int, int]]:
    """The code-point ranges of a class's body (after its ``!`` or ``^``), as Python's
    ``re`` read it when it was a Python class: ``\\`` is a literal, ``x-y`` a range
    unless the ``-`` is first or last, and a ``-`` after a range is a literal.

    A reversed range (``z-a``) matches nothing, as in git (``re`` refused the
    whole file, and the copy failed with a traceback).
    """
    ranges: list[tuple[int, int]] = []
    k, n = 0, len(body)
    while k < n:
        this = ord(body[k])
        if k + 2 < n and body[k + 1] == "-":
            that = ord(body[k + 2])
            if this <= that:
                ranges.append((this, that))
            k += 3
        else:
            ranges.append((this, this))
            k += 1
    return ranges


@dataclass(frozen=True, slots=True)
class _Rule:
    regex: Pattern
    negated: bool
    dir_only: bool


def _parse_rule(line: str) -> _Rule | None:
    line = line.rstrip("\n").rstrip("\r")
    if not line.endswith("\\ "):
        line = line.rstrip(" ")
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
    prefix = "" if anchored or line.startswith("**/") else f"(?:{ANY_RUN}/)?"
    return _Rule(compile_anchored(prefix + _translate(line)), negated, dir_only)


class IgnoreRules:
    """The rules of one ignore file, relative to its folder (``base``, POSIX,
    relative to the hank folder; ``""`` for the hank folder itself)."""

    __slots__ = ("base", "rules")

    def __init__(self, lines: Sequence[str], base: str = "") -> None:
        self.base = base
        self.rules = [r for r in map(_parse_rule, lines) if r is not None]

    def match(self, rel: str, is_dir: bool) -> bool | None:
        """``True`` ignored, ``False`` re-included, ``None`` no rule matched ``rel``
        (a path relative to the hank folder)."""
        if self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1 :]
        verdict: bool | None = None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.search(rel):
                verdict = not rule.negated
        return verdict


def is_ignored(stack: Sequence[IgnoreRules], rel: str, is_dir: bool) -> bool:
    """Whether ``rel`` (relative to the hank folder) is ignored by the rule files in ``stack``,
    outermost first."""
    verdict = False
    for rules in stack:  # deeper files come later and win, as in git
        found = rules.match(rel, is_dir)
        if found is not None:
            verdict = found
    return verdict


def root_rules(hank_dir: Path) -> IgnoreRules:
    """The hank folder's ``.gitignore`` (a symlink is not read), else :data:`DEFAULT_IGNORES`."""
    gitignore = hank_dir / ".gitignore"
    if gitignore.is_file() and not gitignore.is_symlink():
        return IgnoreRules(gitignore.read_text(errors="replace").splitlines())
    return IgnoreRules(DEFAULT_IGNORES)
