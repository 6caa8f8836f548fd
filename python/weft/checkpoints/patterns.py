"""Which workspace files a checkpoint covers: the ``checkpointedFiles`` glob dialect.

A hank lists globs per codon; the checkpoint of codon *k* covers the union of the
patterns of every plan entry up to *k*. The dialect is the one a hank author
knows from shells, ``.gitignore`` and minimatch, pinned down so that there is
one answer for every path:

- Paths are relative to the agent's workspace and use ``/``. A leading ``./``
  or ``/`` is dropped; ``..``, drive letters and empty patterns are refused.
- ``*`` matches any run of characters inside one path component, dot files
  included; ``?`` matches one character; ``[abc]``, ``[a-z]``, ``[!abc]`` (or
  ``[^abc]``) match one character of a class. None of them matches ``/``.
- ``**`` as a whole component matches zero or more directories:
  ``src/**/*.py`` covers ``src/a.py`` and ``src/x/y/a.py``; ``notes/**`` covers
  everything inside ``notes``. Elsewhere ``**`` is the same as ``*``.
- ``{a,b}`` is either alternative (nesting allowed); ``\\`` escapes the next
  character.
- A pattern without a slash is anchored at the workspace root (as in the
  reference runtime since 0.11): ``*.md`` covers ``README.md`` but not
  ``docs/a.md``; write ``**/*.md`` for every depth.
- A pattern that matches a directory covers everything inside it: ``notes``,
  ``notes/`` and ``src/*`` all take whole subtrees. A trailing ``/`` makes the
  pattern match directories only.
- ``!pattern`` removes what it matches from the union, whatever its position.
- The runtime's own paths are never covered, whatever the patterns say:
  ``read_only_data_source`` and ``rigArchive`` at the root, and ``.weft``,
  ``.weft.backup-*``, ``.weftcheckpoints*`` (temp and quarantine folders) and
  ``.git`` at any depth, compared case- and Unicode-insensitively.

The file names are the agent's, so hostile: the globs are matched with
:class:`weft._core.Pattern` (finite automata, linear in the name, whatever the
glob), built from :mod:`weft.linear_glob`; Python's ``re`` took seconds on
``*a*a*a*b`` against a 250-character name, and more with each ``*``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from weft._core import Pattern
from weft.checkpoints.errors import CheckpointPatternError
from weft.linear_glob import (
    ANY_RUN,
    ONE_NOT_SLASH,
    RUN_NOT_SLASH,
    compile_anchored,
    literal,
    one_of,
)

#: Root-level names that are never checkpointed (the input link and rig archives).
ROOT_EXCLUDED = ("read_only_data_source", "rigarchive")
#: Names excluded at any depth (the runtime folders and git's own).
ANY_DEPTH_EXCLUDED = (".weft", ".git")
#: Name prefixes excluded at any depth (execution backups, checkpoint temp/quarantine dirs).
ANY_DEPTH_EXCLUDED_PREFIXES = (".weft.backup-", ".weftcheckpoints")

_SLASH = ord("/")

# A quick screen for the common, pure-ASCII case; non-ASCII paths are folded one
# component at a time (NFKC + casefold) because a regex cannot fold them faithfully.
# A Pattern, not re: it runs on every file of a scan, and re took 1.7 us a path
# (most of a match), this 0.2 us. "\n?\z" is re's "$", which it replaced.
_ASCII_EXCLUDED = Pattern(
    r"(?i-u)(?:^|/)(?:\.weft|\.git|\.weft\.backup-[^/]*|\.weftcheckpoints[^/]*)(?:/|\n?\z)"
    r"|^(?:read_only_data_source|rigarchive)(?:/|\n?\z)"
)


def _fold(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


def is_excluded(path: str) -> bool:
    """Whether ``path`` (workspace-relative, ``/``-separated) is a runtime path never covered."""
    if path.isascii():
        return _ASCII_EXCLUDED.search(path)
    parts = path.split("/")
    if _fold(parts[0]) in ROOT_EXCLUDED:
        return True
    for part in parts:
        folded = _fold(part)
        if folded in ANY_DEPTH_EXCLUDED or folded.startswith(ANY_DEPTH_EXCLUDED_PREFIXES):
            return True
    return False


def _expand_braces(pattern: str) -> list[str]:
    """``a{b,c{d,e}}`` -> ``[ab, acd, ace]``; unbalanced or comma-less braces stay literal."""
    depth = 0
    start = -1
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                options = _split_top_level(pattern[start + 1 : i])
                if len(options) > 1:
                    head, tail = pattern[:start], pattern[i + 1 :]
                    out: list[str] = []
                    for option in options:
                        out.extend(_expand_braces(head + option + tail))
                    return out
        i += 1
    return [pattern]


def _split_top_level(body: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            current.append(body[i : i + 2])
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _component_regex(component: str) -> str:
    """The regex (Rust syntax) for one path component (no ``/``) of a glob."""
    out: list[str] = []
    i = 0
    n = len(component)
    while i < n:
        ch = component[i]
        if ch == "\\":
            if i + 1 < n:
                out.append(literal(component[i + 1]))
                i += 2
            else:
                out.append(literal("\\"))
                i += 1
        elif ch == "*":
            while i < n and component[i] == "*":
                i += 1
            out.append(RUN_NOT_SLASH)
        elif ch == "?":
            out.append(ONE_NOT_SLASH)
            i += 1
        elif ch == "[":
            cls, end = _char_class(component, i)
            if cls is None:
                out.append(literal("["))
                i += 1
            else:
                out.append(cls)
                i = end
        else:
            out.append(literal(ch))
            i += 1
    return "".join(out)


def _char_class(component: str, start: int) -> tuple[str | None, int]:
    """Translates the class opening at ``start``; ``(None, start)`` if it never closes.

    ``-`` between two items is a range (``[a-c]``), elsewhere a literal
    (``[-a]``, ``[a-]``, and after a range: ``[a-c-e]`` is a to c, ``-`` and
    ``e``), as it was when these classes were Python ``re`` classes; a
    reversed range (``[z-a]``) is refused, as ``re`` refused it.
    """
    i = start + 1
    n = len(component)
    negate = i < n and component[i] in "!^"
    if negate:
        i += 1
    # Each item: a character, or the "-" of a potential range (None).
    items: list[str | None] = []
    first = True
    while i < n:
        ch = component[i]
        if ch == "]" and not first:
            ranges = _class_ranges(items, component[start : i + 1])
            if not negate:
                # No class of a component matches "/": take it out of the ranges.
                ranges = [
                    r
                    for lo, hi in ranges
                    for r in ((lo, min(hi, _SLASH - 1)), (max(lo, _SLASH + 1), hi))
                    if r[0] <= r[1]
                ]
            else:
                ranges.append((_SLASH, _SLASH))
            return one_of(ranges, negate=negate), i + 1
        first = False
        if ch == "\\" and i + 1 < n:
            items.append(component[i + 1])
            i += 2
            continue
        if ch == "-" and items and i + 1 < n and component[i + 1] != "]":
            items.append(None)
        else:
            items.append(ch)
        i += 1
    return None, start


def _class_ranges(items: Sequence[str | None], text: str) -> list[tuple[int, int]]:
    """The code-point ranges of a class's items (``None`` is a range's ``-``)."""
    ranges: list[tuple[int, int]] = []
    k = 0
    while k < len(items):
        item = items[k]
        this = ord("-") if item is None else ord(item)
        # A range's "-" is never last (it is followed by an item before "]").
        if k + 1 < len(items) and items[k + 1] is None and k + 2 < len(items):
            after = items[k + 2]
            that = ord("-") if after is None else ord(after)
            if that < this:
                raise _BadClassError(f"bad character range in {text!r}")
            ranges.append((this, that))
            k += 3
        else:
            ranges.append((this, this))
            k += 1
    return ranges


class _BadClassError(ValueError):
    """A class no glob can mean (a reversed range)."""


def normalize_pattern(pattern: str) -> str:
    """The pattern in canonical form (no ``./``, no leading ``/``), or a clear error."""
    raw = pattern
    if not isinstance(pattern, str):
        raise CheckpointPatternError(
            f"checkpointedFiles pattern {raw!r} is not a string: list glob strings "
            "such as 'notes/**' or '*.md'",
            pattern=str(raw),
        )
    if pattern.strip() == "":
        raise CheckpointPatternError(
            "checkpointedFiles has an empty pattern: remove it or name files such as 'notes/**'",
            pattern=raw,
        )
    if "\x00" in pattern:
        raise CheckpointPatternError(
            f"checkpointedFiles pattern {raw!r} contains a NUL character: remove it",
            pattern=raw,
        )
    if re.match(r"^[A-Za-z]:[\\/]", pattern) or pattern.startswith("\\\\"):
        raise CheckpointPatternError(
            f"checkpointedFiles pattern {raw!r} is an absolute Windows path: use a path "
            "relative to the agent's workspace, with '/' separators",
            pattern=raw,
        )
    while pattern.startswith("./"):
        pattern = pattern[2:]
    pattern = pattern.lstrip("/")
    pattern = re.sub(r"/(?:\./)+", "/", pattern)
    pattern = re.sub(r"/{2,}", "/", pattern)
    if pattern.endswith("/."):
        pattern = pattern[:-1]
    if pattern in ("", "."):
        # "./" or "/" names the whole workspace.
        return "**"
    if any(part == ".." for part in pattern.split("/")):
        raise CheckpointPatternError(
            f"checkpointedFiles pattern {raw!r} leaves the workspace ('..'): checkpoints only "
            "hold files inside the agent's workspace; use a path relative to it",
            pattern=raw,
        )
    return pattern


@dataclass(frozen=True)
class _Glob:
    """One brace-free glob: per-component regexes plus the whole-path regex."""

    components: tuple[str, ...]
    component_res: tuple[Pattern | None, ...]  # None for "**"
    dir_only: bool
    path_regex: str  # Rust syntax, unanchored

    @classmethod
    def compile(cls, pattern: str) -> _Glob:
        dir_only = pattern.endswith("/")
        body = pattern.rstrip("/") or "**"
        components = tuple(body.split("/"))
        regex: list[str] = []
        last = len(components) - 1
        for i, comp in enumerate(components):
            if comp == "**":
                regex.append(ANY_RUN if i == last else f"(?:{RUN_NOT_SLASH}/)*")
            else:
                regex.append(_component_regex(comp))
                if i != last:
                    regex.append("/")
        # A match on a directory covers everything beneath it.
        regex.append(f"/(?s-u:.){ANY_RUN}" if dir_only else f"(?:/{ANY_RUN})?")
        comp_res = tuple(
            None if c == "**" else compile_anchored(_component_regex(c)) for c in components
        )
        path_regex = "".join(regex)
        compile_anchored(path_regex)  # refused here if alone it is past the size bound
        return cls(components, comp_res, dir_only, path_regex)

    def could_cover_under(self, parts: Sequence[str]) -> bool:
        """Whether some path strictly inside directory ``parts`` can match this glob."""
        ancestor, states = self._advance(parts)
        return ancestor or bool(states)

    def covers_directory(self, parts: Sequence[str]) -> bool:
        """Whether every path strictly inside directory ``parts`` matches this glob."""
        ancestor, states = self._advance(parts)
        n = len(self.components)
        if ancestor or n in states:
            return True  # the glob matched the directory or an ancestor
        # What is left is a trailing "**", which takes any path below (dir-only: 2+ deep).
        return not self.dir_only and n - 1 in states and self.components[n - 1] == "**"

    def _advance(self, parts: Sequence[str]) -> tuple[bool, set[int]]:
        """Runs the component automaton over ``parts``.

        State ``i`` means the first ``i`` components have matched. A ``**`` in
        the middle may match no component; a trailing ``**`` needs at least one
        (``notes/**`` is what is inside ``notes``). Returns whether the glob
        matched a proper ancestor (which covers the whole subtree), and the
        states after the last part.
        """
        n = len(self.components)
        states = self._closure({0})
        for part in parts:
            if n in states:
                return True, states
            nxt: set[int] = set()
            for s in states:
                comp_re = self.component_res[s]
                if comp_re is None:
                    nxt.add(s)
                    if s == n - 1:
                        nxt.add(n)
                elif comp_re.search(part):
                    nxt.add(s + 1)
            states = self._closure(nxt)
            if not states:
                return False, states
        return False, states

    def _closure(self, states: set[int]) -> set[int]:
        last = len(self.components) - 1
        out = set(states)
        todo = list(states)
        while todo:
            s = todo.pop()
            if s < last and self.components[s] == "**" and s + 1 not in out:
                out.add(s + 1)
                todo.append(s + 1)
        return out

    def literal_base(self) -> str:
        """The longest leading run of glob-free components (a directory or a file)."""
        base: list[str] = []
        for comp, comp_re in zip(self.components, self.component_res, strict=True):
            if comp_re is None or _has_magic(comp):
                break
            base.append(comp.replace("\\", ""))
        return "/".join(base)


def _has_magic(component: str) -> bool:
    return any(ch in component for ch in "*?[\\")


@dataclass(frozen=True)
class PatternSet:
    """A compiled union of ``checkpointedFiles`` patterns.

    ``matches(path)`` decides file coverage in one regex call (two with exclusions;
    more only for a union too large for one pattern); ``could_cover_under``
    lets directory walks skip subtrees that no pattern can reach.
    """

    patterns: tuple[str, ...]
    _include: tuple[_Glob, ...] = field(repr=False)
    _exclude: tuple[_Glob, ...] = field(repr=False)
    _include_re: tuple[Pattern, ...] = field(repr=False)
    _exclude_re: tuple[Pattern, ...] = field(repr=False)

    @classmethod
    def compile(cls, patterns: Iterable[str]) -> PatternSet:
        """Compiles ``patterns`` (raises :class:`CheckpointPatternError` on a bad one)."""
        if isinstance(patterns, str):
            patterns = [patterns]
        originals = tuple(patterns)
        include: list[_Glob] = []
        exclude: list[_Glob] = []
        for raw in originals:
            negated = isinstance(raw, str) and raw.startswith("!")
            text = normalize_pattern(raw[1:] if negated else raw)
            target = exclude if negated else include
            for expanded in _expand_braces(text):
                try:
                    target.append(_Glob.compile(normalize_pattern(expanded)))
                except _BadClassError as exc:
                    raise CheckpointPatternError(
                        f"checkpointedFiles pattern {raw!r} is not a valid glob ({exc}): "
                        "check its [...] classes, e.g. '[a-z]' rather than '[z-a]'",
                        pattern=raw,
                    ) from exc
                except ValueError as exc:
                    # Past the engine's size bound: a glob of hundreds of classes.
                    raise CheckpointPatternError(
                        f"checkpointedFiles pattern {raw!r} is too large to match ({exc}): "
                        "split it into shorter patterns",
                        pattern=raw,
                    ) from exc
        return cls(
            originals,
            tuple(include),
            tuple(exclude),
            _union(include),
            _union(exclude),
        )

    def matches(self, path: str) -> bool:
        """Whether the file at ``path`` is covered."""
        # Plain loops: a generator in any() costs more than the search itself.
        for include in self._include_re:
            if include.search(path):
                break
        else:
            return False
        for exclude in self._exclude_re:
            if exclude.search(path):
                return False
        return not is_excluded(path)

    def could_cover_under(self, directory: str) -> bool:
        """Whether any file inside ``directory`` may be covered (``""`` is the root)."""
        if directory == "":
            return bool(self._include)
        if is_excluded(directory):
            return False
        parts = directory.split("/")
        if any(g.covers_directory(parts) for g in self._exclude):
            return False
        return any(g.could_cover_under(parts) for g in self._include)

    def scan_roots(self) -> list[str] | None:
        """Workspace-relative paths a scan must look at, or ``None`` for the whole workspace.

        A pattern starting with a literal directory (``notes/**``) only needs that
        directory; one that starts with a glob at the root needs everything.
        """
        roots: set[str] = set()
        for g in self._include:
            base = g.literal_base()
            if base == "":
                return None
            roots.add(base)
        # Drop roots nested inside other roots.
        ordered = sorted(roots)
        kept: list[str] = []
        for root in ordered:
            if not any(root == k or root.startswith(k + "/") for k in kept):
                kept.append(root)
        return kept

    def is_superset_of(self, other: PatternSet) -> bool:
        """Whether every file ``other`` covers is certainly covered here too."""
        mine = {p for p in self.patterns if p.startswith("!")}
        theirs = {p for p in other.patterns if p.startswith("!")}
        return set(other.patterns) <= set(self.patterns) and mine <= theirs


def _union(globs: Sequence[_Glob]) -> tuple[Pattern, ...]:
    """The globs as few patterns as fit the engine's size bound (one, but for
    hundreds of globs, such as a brace expansion's)."""
    if not globs:
        return ()
    try:
        return (compile_anchored("|".join(f"(?:{g.path_regex})" for g in globs)),)
    except ValueError:
        if len(globs) == 1:
            raise  # unreachable: each glob compiled alone in _Glob.compile
        half = len(globs) // 2
        return _union(globs[:half]) + _union(globs[half:])
