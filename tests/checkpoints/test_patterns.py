"""The checkpointedFiles glob dialect: documented examples, errors, and a reference model."""

from __future__ import annotations

import re
import time
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.checkpoints.oracle import covered

from weft.checkpoints import CheckpointPatternError, PatternSet, is_excluded
from weft.checkpoints.patterns import _component_regex, normalize_pattern
from weft.linear_glob import compile_anchored

# (pattern, path, covered?) straight from the rules in docs/checkpoints.md.
DOCUMENTED = [
    ("*.md", "README.md", True),
    ("*.md", "docs/a.md", False),  # slashless patterns are anchored at the root
    ("**/*.md", "docs/a.md", True),
    ("**/*.md", "README.md", True),
    ("src/**/*.py", "src/a.py", True),  # ** matches zero directories
    ("src/**/*.py", "src/x/y/a.py", True),
    ("src/**/*.py", "src/x/y/a.txt", False),
    ("src/**/*.py", "lib/src/a.py", False),
    ("notes/**", "notes/a/b/c.txt", True),
    ("notes/**", "notes", False),
    ("notes", "notes/a.txt", True),  # a directory name covers its content
    ("notes", "notes", True),  # ...or the file of that name
    ("notes/", "notes/a.txt", True),
    ("notes/", "notes", False),  # a trailing slash: directories only
    ("src/*", "src/sub/deep.py", True),  # the match src/sub is a directory
    ("src/*.py", "src/sub/deep.py", False),
    ("*", "anything/at/all", True),
    ("?.txt", "a.txt", True),
    ("?.txt", "ab.txt", False),
    ("[ab].txt", "b.txt", True),
    ("[!ab].txt", "b.txt", False),
    ("[!ab].txt", "c.txt", True),
    ("[a-c]x", "bx", True),
    ("*.{md,txt}", "a.txt", True),
    ("*.{md,txt}", "a.py", False),
    ("{src,lib}/**/*.py", "lib/a.py", True),
    ("./notes/**", "notes/a", True),
    ("/notes/**", "notes/a", True),
    ("notes//a.md", "notes/a.md", True),
    ("*", ".hidden", True),  # dot files are not special
    (r"\*.md", "*.md", True),
    (r"\*.md", "a.md", False),
    ("**", ".weft/state.json", False),  # runtime paths, whatever the patterns say
    ("**", "a/.WEFT/x", False),
    ("**", "rigArchive/x", False),
    ("**", "sub/rigArchive/x", True),  # rigArchive is excluded at the root only
    ("**", "read_only_data_source", False),
    ("**", ".weft.backup-2025-01-01/x", False),
    ("**", "x/.weftcheckpoints-quarantine-1/HEAD", False),
    ("**", "proj/.git/config", False),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), DOCUMENTED)
def test_documented_examples(pattern: str, path: str, expected: bool) -> None:
    assert PatternSet.compile([pattern]).matches(path) is expected


def test_negation_removes_from_the_union_whatever_its_position() -> None:
    early = PatternSet.compile(["!src/gen/**", "src/**"])
    late = PatternSet.compile(["src/**", "!src/gen/**"])
    for pset in (early, late):
        assert pset.matches("src/a.py")
        assert not pset.matches("src/gen/b.py")
        assert not pset.could_cover_under("src/gen")


def test_a_directory_only_exclusion_keeps_direct_children() -> None:
    pset = PatternSet.compile(["a", "!a/a/**/"])
    assert pset.matches("a/a/a")  # a file directly in a/a: not inside a directory under it
    assert not pset.matches("a/a/b/c")
    assert pset.could_cover_under("a/a")
    assert not pset.could_cover_under("a/a/b")


def test_runtime_paths_fold_case_and_unicode() -> None:
    fullwidth = str.maketrans(
        "ACEGHIRVWeft", "\uff21\uff23\uff25\uff27\uff28\uff29\uff32\uff36\uff37\uff45\uff46\uff54"
    )
    assert is_excluded("RIGARCHIVE/x".translate(fullwidth))
    assert is_excluded("a/.Weft/b".translate(fullwidth))
    assert is_excluded("a/.GiT")
    assert not is_excluded("a/.weftish/b")
    assert not is_excluded("a/rigArchive/b")


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("", "empty pattern"),
        ("   ", "empty pattern"),
        ("../secrets", "leaves the workspace"),
        ("notes/../../x", "leaves the workspace"),
        ("C:\\data\\x", "absolute Windows path"),
        ("[z-a]", "not a valid glob"),
    ],
)
def test_bad_patterns_are_refused_with_a_reason(pattern: str, needle: str) -> None:
    with pytest.raises(CheckpointPatternError) as info:
        PatternSet.compile([pattern])
    assert needle in str(info.value)
    assert info.value.pattern == pattern


def test_scan_roots_limit_a_full_comparison_to_literal_prefixes() -> None:
    assert PatternSet.compile(["notes/**", "src/a/*.py", "src/b"]).scan_roots() == [
        "notes",
        "src/a",
        "src/b",
    ]
    assert PatternSet.compile(["src/**", "src/a/**"]).scan_roots() == ["src"]
    assert PatternSet.compile(["notes/**", "*.md"]).scan_roots() is None
    assert PatternSet.compile([]).scan_roots() == []


# ------------------------------------------------------------- reference model

NAMES = ["a", "b", "ab", "x.md", "y.py", ".h", "rigArchive", ".weft", "n-1"]
GLOB_PARTS = [*NAMES, "*", "?", "**", "*.md", "*.py", "a*", "[ab]", "[!a]*", "{a,b}", "x.{md,py}"]

names = st.sampled_from(NAMES)
paths = st.lists(names, min_size=1, max_size=4).map("/".join)
glob_components = st.lists(st.sampled_from(GLOB_PARTS), min_size=1, max_size=4)
globs = st.builds(
    lambda comps, slash, neg: ("!" if neg else "") + "/".join(comps) + ("/" if slash else ""),
    glob_components,
    st.booleans(),
    st.booleans(),
)
pattern_lists = st.lists(globs, min_size=0, max_size=4)


@given(pattern_lists, paths)
@settings(max_examples=1000)
def test_matching_agrees_with_the_reference_model(patterns: list[str], path: str) -> None:
    assert PatternSet.compile(patterns).matches(path) == covered(patterns, path)


@given(pattern_lists, paths)
@settings(max_examples=1000)
def test_directory_pruning_never_hides_a_covered_file(patterns: list[str], path: str) -> None:
    pset = PatternSet.compile(patterns)
    if pset.matches(path):
        parts = path.split("/")
        for k in range(len(parts)):
            assert pset.could_cover_under("/".join(parts[:k])), "/".join(parts[:k])


@given(pattern_lists, paths, paths)
@settings(max_examples=1000)
def test_a_pruned_directory_has_no_covered_file(
    patterns: list[str], directory: str, rest: str
) -> None:
    pset = PatternSet.compile(patterns)
    if not pset.could_cover_under(directory):
        assert not covered(patterns, f"{directory}/{rest}")


@given(pattern_lists, paths)
@settings(max_examples=1000)
def test_every_covered_file_lies_under_a_scan_root(patterns: list[str], path: str) -> None:
    pset = PatternSet.compile(patterns)
    roots = pset.scan_roots()
    if pset.matches(path) and roots is not None:
        assert any(path == r or path.startswith(r + "/") for r in roots)


# ------------------------------------------------- linear time (hostile names)

# Globs on which Python's re backtracked polynomially (each * or ** a further
# factor), and names made to hit it: the old matcher took 1.2 s on the first
# against 250 characters, and minutes on the 4,000-character ones.
HOSTILE_GLOBS = [
    "*a*a*a*a*a*b",
    "*a*a*a*a*a*a*a*a*a*b",
    "**/a/**/a/**/a/**/b",
    "**/a/**/a/**/a/**/a/**/a/**/b",
    "*?*?*?*?*x",
    "**/*a*a*a*a*b/**",
    "[a]*[a]*[a]*[!b]*b",
    "?*?*?*?*?*?*?*?*?*?*x",
]
HOSTILE_NAMES = [
    "a" * 4000,
    "a/" * 2000,
    "a" * 3999 + "/",
    "x" + "a" * 3998 + "c",
    ("a/" * 1000)[:-1] + "c",
    "é" * 2000,
]


def test_hostile_globs_match_in_linear_time() -> None:
    started = time.perf_counter()
    pset = PatternSet.compile(HOSTILE_GLOBS)
    for name in HOSTILE_NAMES:
        assert not pset.matches(name)
        pset.could_cover_under(name.rstrip("/"))
    for glob in HOSTILE_GLOBS:
        single = PatternSet.compile([glob])
        for name in HOSTILE_NAMES:
            assert not single.matches(name)
    # A generous bound: the new matcher takes milliseconds, the old one minutes.
    assert time.perf_counter() - started < 2.0
    assert PatternSet.compile(["*a*a*a*a*a*b"]).matches("a" * 3999 + "b")
    assert PatternSet.compile(["**/a/**/a/**/a/**/b"]).matches("a/" * 1999 + "b")


def test_a_name_ending_in_a_newline_is_not_matched_as_without_it() -> None:
    # re's "$" also matched before a final newline: "*.md" covered "a.md\n".
    assert not PatternSet.compile(["*.md"]).matches("a.md\n")
    assert PatternSet.compile(["*.md?"]).matches("a.md\n")
    assert not PatternSet.compile(["notes/"]).could_cover_under("notes\n")


def test_undecodable_names_are_one_character_per_byte_as_before() -> None:
    # os.scandir gives an undecodable byte as a lone surrogate (surrogateescape).
    name = b"x\xff.md".decode("utf-8", "surrogateescape")
    assert PatternSet.compile(["?\udcff.md"]).matches(name)
    assert PatternSet.compile(["x?.md"]).matches(name)
    assert not PatternSet.compile(["x??.md"]).matches(name)
    assert PatternSet.compile(["x[!a].md"]).matches(name)
    assert PatternSet.compile(["x[\udc80-\udcff].md"]).matches(name)
    assert not PatternSet.compile(["x[\udc80-\udcfe].md"]).matches(name)
    assert PatternSet.compile(["x*.md"]).matches(name)


def test_a_union_past_the_engine_size_bound_is_split() -> None:
    # 1,024 globs from one brace expansion, each with classes: no single pattern holds them.
    braces = "".join("{a,[!b]?}" for _ in range(10))
    pset = PatternSet.compile([braces + "/*.py"])
    assert len(pset._include_re) > 1
    assert pset.matches("a" * 10 + "/x.py")
    assert pset.matches("cd" * 10 + "/x.py")
    assert not pset.matches("b" * 20 + "/x.py")


def test_a_glob_past_the_engine_size_bound_is_refused_with_a_reason() -> None:
    pattern = "[!é]" * 300  # 300 classes of non-ASCII exclusions: Unicode automata
    with pytest.raises(CheckpointPatternError) as info:
        PatternSet.compile([pattern])
    assert "too large to match" in str(info.value)


# ----------------------------------------- the same answers as the re matcher

# The translation to Python's re this module used before it matched in linear
# time, kept as the oracle; one change: "$" -> r"\Z" (see the newline test).


def _old_component_regex(component: str) -> str:
    out: list[str] = []
    i = 0
    n = len(component)
    while i < n:
        ch = component[i]
        if ch == "\\":
            if i + 1 < n:
                out.append(re.escape(component[i + 1]))
                i += 2
            else:
                out.append(re.escape("\\"))
                i += 1
        elif ch == "*":
            while i < n and component[i] == "*":
                i += 1
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            cls, end = _old_char_class(component, i)
            if cls is None:
                out.append(re.escape("["))
                i += 1
            else:
                out.append(cls)
                i = end
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def _old_char_class(component: str, start: int) -> tuple[str | None, int]:
    i = start + 1
    n = len(component)
    negate = i < n and component[i] in "!^"
    if negate:
        i += 1
    items: list[str] = []
    first = True
    while i < n:
        ch = component[i]
        if ch == "]" and not first:
            body = "".join(items)
            return (f"[^/{body}]" if negate else f"(?!/)[{body}]"), i + 1
        first = False
        if ch == "\\" and i + 1 < n:
            items.append(re.escape(component[i + 1]))
            i += 2
            continue
        if ch == "-" and items and i + 1 < n and component[i + 1] != "]":
            items.append("-")
        else:
            items.append(re.escape(ch) if ch != "-" else r"\-")
        i += 1
    return None, start


def _old_path_regex(pattern: str) -> re.Pattern[str]:
    dir_only = pattern.endswith("/")
    components = (pattern.rstrip("/") or "**").split("/")
    regex = ["^"]
    last = len(components) - 1
    for i, comp in enumerate(components):
        if comp == "**":
            regex.append(".*" if i == last else "(?:[^/]*/)*")
        else:
            regex.append(_old_component_regex(comp))
            if i != last:
                regex.append("/")
    regex.append(r"/.+\Z" if dir_only else r"(?:/.*)?\Z")
    return re.compile("".join(regex), re.DOTALL)


GLOB_ATOMS = ["a", "b", "*", "?", "/", "**", "[ab]", "[!a]", "[a-b]", "[]a]", "[a-]", "é", "[!é]"]
GLOB_ATOMS += ["[é-ê]", "\\*", "-", "[", "[a-b-c]", "[--a]", "[\udc80-\udcff]", "\udcff"]
NAME_CHARS = ["a", "b", "c", "/", "-", "]", "*", "é", "ê", "\udcff", "\n", "."]

small_globs = st.lists(st.sampled_from(GLOB_ATOMS), min_size=1, max_size=7).map("".join)
small_names = st.lists(st.sampled_from(NAME_CHARS), min_size=1, max_size=10).map("".join)


def _old_or_error(pattern: str) -> re.Pattern[str] | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # re's "possible set difference" on [--a]
        try:
            return _old_path_regex(pattern)
        except re.error:
            return None


@given(small_globs, small_names)
@settings(max_examples=1500)
def test_the_linear_matcher_agrees_with_the_re_one(glob: str, name: str) -> None:
    try:
        normalized = normalize_pattern(glob)
    except CheckpointPatternError:
        return
    old = _old_or_error(normalized)
    if old is None:  # re refused the glob: so does the new matcher
        with pytest.raises(CheckpointPatternError):
            PatternSet.compile([glob])
        return
    expected = old.match(name) is not None and not is_excluded(name)
    assert PatternSet.compile([glob]).matches(name) == expected
    for component in normalized.rstrip("/").split("/"):
        if component != "**":
            old_component = re.compile(rf"{_old_component_regex(component)}\Z", re.DOTALL)
            new_component = compile_anchored(_component_regex(component))
            for part in name.split("/"):
                assert new_component.search(part) == (old_component.match(part) is not None)


_OLD_ASCII_EXCLUDED = re.compile(
    r"(?:^|/)(?:\.weft|\.git|\.weft\.backup-[^/]*|\.weftcheckpoints[^/]*)(?:/|$)"
    r"|^(?:read_only_data_source|rigarchive)(?:/|$)",
    re.IGNORECASE | re.ASCII,
)
RUNTIME_NAMES = [
    ".weft",
    ".WeFt",
    ".git",
    ".GIT",
    ".weft.backup-1",
    ".weftcheckpoints-q",
    "rigArchive",
]
RUNTIME_NAMES += ["read_only_data_source", "a", ".weftx", ".gitx", "\n", ".git\n", "x.weft"]


@given(st.lists(st.sampled_from(RUNTIME_NAMES), min_size=1, max_size=4).map("/".join))
@settings(max_examples=500)
def test_the_runtime_path_screen_agrees_with_the_re_one(path: str) -> None:
    assert is_excluded(path) == (_OLD_ASCII_EXCLUDED.search(path) is not None)
